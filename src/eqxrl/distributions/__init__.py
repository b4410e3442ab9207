"""Action distributions on top of distreqx."""

from ._masked_categorical import MaskedCategorical as MaskedCategorical
