/** Fetch bodies for the unit tests of the streamed answers. */

/** A fetch body sending `chunks` (strings as UTF-8, or raw bytes) one read each. */
export function body(
  ...chunks: (string | Uint8Array)[]
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) {
        controller.enqueue(
          typeof chunk === 'string' ? encoder.encode(chunk) : chunk
        );
      }
      controller.close();
    }
  });
}
