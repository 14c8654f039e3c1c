"""`VisionHandler`: the base of the image handlers (decode, transform, batch, explain).

Each row's input may be an image file (PNG/JPEG bytes), a base64 string of one,
or a nested list of floats already shaped like the model input. Files go
through `image_processing`, configured by class attributes (resize, crop,
normalize), and the rows are stacked into one batch. Explanations are Captum
IntegratedGradients with 15 steps, one attribution map per image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers import imaging
from jupyter_serve.handlers.base import BaseHandler
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.utils import row_input

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from jupyter_serve.handlers.contract import HandlerContext


class VisionHandler(BaseHandler):
    """Image models: inputs are decoded and transformed into a `[N, C, H, W]` batch.

    Set the class attributes to configure `image_processing`, or override it
    (a callable class attribute such as a torchvision `Compose` also works).
    """

    #: PIL mode images are converted to ("RGB", "L", ...).
    image_mode: str = "RGB"
    #: Resize the shorter side to this many pixels first (None: keep the size).
    resize_size: int | None = None
    #: Then crop the centre square of this size (None: no crop).
    crop_size: int | None = None
    #: Per-channel normalisation (None: leave values in [0, 1]).
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    #: Pixel limit applied when the server's `limit_max_image_pixels` is true.
    max_image_pixels: int | None = imaging.PIL_MAX_IMAGE_PIXELS
    ig_steps = 15

    def initialize(self, context: HandlerContext) -> None:
        """Load the model, then apply the server's image-size limit to PIL."""
        super().initialize(context)
        from PIL import Image as PILImage

        limited = context.system_properties.get("limit_max_image_pixels", True)
        PILImage.MAX_IMAGE_PIXELS = self.max_image_pixels if limited else None

    def image_processing(self, image: Image) -> torch.Tensor:
        """Resize, convert, crop and normalize one decoded image into `[C, H, W]`."""
        if self.resize_size is not None:
            image = imaging.resize_shorter(image, self.resize_size)
        tensor = imaging.to_tensor(image, self.image_mode)
        if self.crop_size is not None:
            tensor = imaging.center_crop(tensor, self.crop_size)
        if self.mean is not None and self.std is not None:
            tensor = imaging.normalize(tensor, self.mean, self.std)
        return tensor

    def preprocess(self, data: Sequence[Any]) -> torch.Tensor:
        """One `[N, C, H, W]` float batch from the rows' images or float lists."""
        import torch

        images = [self._image_tensor(row_input(row), index) for index, row in enumerate(data)]
        shapes = {tuple(image.shape) for image in images}
        if len(shapes) > 1:
            raise PredictionException(
                f"The images of a batch must have one shape after processing; got {sorted(shapes)}",
                400,
            )
        return torch.stack(images).to(self.device)

    def _image_tensor(self, value: Any, index: int) -> torch.Tensor:
        import torch

        if isinstance(value, str):
            value = imaging.decode_base64(value)
        if isinstance(value, (bytes, bytearray)):
            return self.image_processing(imaging.open_image(value))
        if isinstance(value, torch.Tensor):
            return value.float()
        try:
            return torch.tensor(value, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise PredictionException(
                f"Row {index}: expected an image file, a base64 string or a list of floats; "
                f"got {type(value).__name__}",
                400,
            ) from exc
