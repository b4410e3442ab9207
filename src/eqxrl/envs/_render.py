import os

import numpy as np
from jaxtyping import ArrayLike, UInt8


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
