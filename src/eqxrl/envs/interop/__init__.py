"""Bridges to and from other libraries: gymnax and gymnasium both ways, Brax and
MuJoCo Playground both ways, Jumanji and JaxMARL in, and the port-parity checker.
Re-exported by `eqxrl.envs` under the same names."""

from ._brax import (
    FromBrax as FromBrax,
    ToBrax as ToBrax,
    ToBraxState as ToBraxState,
    from_brax as from_brax,
    to_brax as to_brax,
)
from ._brax_randomization import brax_randomization as brax_randomization
from ._gymnasium import (
    FromGymnasium as FromGymnasium,
    FromGymnasiumState as FromGymnasiumState,
    from_gymnasium as from_gymnasium,
    to_gymnasium as to_gymnasium,
)
from ._gymnax import (
    FromGymnax as FromGymnax,
    GymnaxParams as GymnaxParams,
    ToGymnax as ToGymnax,
    from_gymnax as from_gymnax,
    to_gymnax as to_gymnax,
)
from ._jaxmarl import (
    FromJaxMARL as FromJaxMARL,
    FromJaxMARLState as FromJaxMARLState,
    from_jaxmarl as from_jaxmarl,
)
from ._jumanji import FromJumanji as FromJumanji, from_jumanji as from_jumanji
from ._parity import (
    FieldParity as FieldParity,
    ParityReport as ParityReport,
    check_parity as check_parity,
)
