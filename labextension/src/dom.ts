/** Small DOM helpers shared by the views: build elements, set text only when it changed. */

export type Attributes = Record<string, string>;

/** A new element with a class, attributes and children. */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  attributes: Attributes = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

/** An SVG element with attributes. */
export function svgElement<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Attributes = {}
): SVGElementTagNameMap[K] {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  return node;
}

/** Set `node`'s text, touching the DOM only when it changes. */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

/** Set an attribute, touching the DOM only when it changes. */
export function setAttribute(node: Element, name: string, value: string): void {
  if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

/** A button that runs `onClick`. */
export function button(
  label: string,
  className: string,
  onClick: () => void,
  title = ''
): HTMLButtonElement {
  const node = element(
    'button',
    `jp-Button jp-mod-styled jp-mod-small ${className}`,
    {
      type: 'button',
      title: title || label
    }
  );
  node.textContent = label;
  node.addEventListener('click', onClick);
  return node;
}
