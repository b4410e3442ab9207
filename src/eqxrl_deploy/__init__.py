"""Run an eqxrl policy exported to ONNX without JAX or eqxrl: onnxruntime and NumPy
(and, for [`run_mujoco`][eqxrl_deploy.run_mujoco], the `mujoco` package). Install
with `pip install 'eqxrl[deploy]'`; importing this package never imports JAX."""

from ._mujoco import RolloutResult as RolloutResult, run_mujoco as run_mujoco
from ._policy import DeployError as DeployError, OnnxPolicy as OnnxPolicy
