import os

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, UInt8


def save_gif(
    frames: UInt8[ArrayLike, "num_frames height width 3"],
    path: str | os.PathLike,
    fps: int | float = 10,
    loop: bool = True,
) -> None:
    """Write RGB frames to an animated GIF (on the host, with Pillow).

    Needs Pillow: `pip install "eqxrl[render]"`.

    **Arguments:**

    - `frames`: uint8 `[num_frames, height, width, 3]`, e.g. from
      `jax.vmap(env.render)(states)`.
    - `path`: the file to write.
    - `fps`: frames per second.
    - `loop`: loop forever (otherwise play once).

    !!! example

        ```python
        frames = jax.vmap(env.render)(states)  # states stacked by lax.scan
        eqxrl.envs.save_gif(frames, "snake.gif", fps=12)
        ```
    """
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError(
            'save_gif needs Pillow: pip install "eqxrl[render]" (or pillow).'
        ) from error
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(
            "save_gif: frames must be uint8 [num_frames, height, width, 3], got "
            f"{frames.dtype} {frames.shape}."
        )
    if len(frames) == 0:
        raise ValueError("save_gif: there are no frames to write.")
    if fps <= 0:
        raise ValueError(f"save_gif: fps={fps} must be positive.")
    images = [Image.fromarray(frame) for frame in frames]
    options = {"loop": 0} if loop else {}
    images[0].save(
        os.fspath(path),
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000 / fps)),
        optimize=False,
        **options,
    )


# Shapes as boolean pixel masks, for `render` methods in pure jax.numpy (jit- and
# vmap-able). Coordinates are (row, column) in pixels, from the top left; a pixel
# is inside a shape when its centre is.


def _pixel_centres(height: int, width: int) -> tuple[Array, Array]:
    rows = jnp.arange(height, dtype=jnp.float32)[:, None] + 0.5
    columns = jnp.arange(width, dtype=jnp.float32)[None, :] + 0.5
    return rows, columns


def rectangle(
    height: int, width: int, top: ArrayLike, left: ArrayLike, size_y, size_x
) -> Bool[Array, "height width"]:
    """Pixels inside an axis-aligned rectangle."""
    rows, columns = _pixel_centres(height, width)
    return (
        (rows >= top)
        & (rows < top + size_y)
        & (columns >= left)
        & (columns < left + size_x)
    )


def disc(
    height: int, width: int, centre: Float[ArrayLike, "2"], radius: ArrayLike
) -> Bool[Array, "height width"]:
    """Pixels inside a disc; `centre` is `(x, y)`: column, then row."""
    rows, columns = _pixel_centres(height, width)
    centre = jnp.asarray(centre, jnp.float32)
    return (columns - centre[0]) ** 2 + (rows - centre[1]) ** 2 <= radius**2


def line_segment(
    height: int,
    width: int,
    start: Float[ArrayLike, "2"],
    end: Float[ArrayLike, "2"],
    half_width: ArrayLike,
) -> Bool[Array, "height width"]:
    """Pixels within `half_width` of the segment from `start` to `end` (`(x, y)`)."""
    rows, columns = _pixel_centres(height, width)
    start = jnp.asarray(start, jnp.float32)
    end = jnp.asarray(end, jnp.float32)
    direction = end - start
    length_squared = jnp.maximum(jnp.sum(direction**2), 1e-12)
    along = ((columns - start[0]) * direction[0] + (rows - start[1]) * direction[1]) / (
        length_squared
    )
    along = jnp.clip(along, 0.0, 1.0)
    nearest_x = start[0] + along * direction[0]
    nearest_y = start[1] + along * direction[1]
    return (columns - nearest_x) ** 2 + (rows - nearest_y) ** 2 <= half_width**2


def paint(
    image: UInt8[Array, "height width 3"],
    mask: Bool[Array, "height width"],
    colour: int | tuple[int, int, int],
) -> UInt8[Array, "height width 3"]:
    """`image` with the pixels of `mask` set to `colour` (a grey level or RGB)."""
    rgb = jnp.broadcast_to(jnp.asarray(colour, jnp.uint8), (3,))
    return jnp.where(mask[..., None], rgb, image)
