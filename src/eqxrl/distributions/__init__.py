"""Action distributions on top of distreqx."""

from ._base import AbstractActionDistribution as AbstractActionDistribution
from ._gaussian import DiagonalGaussian as DiagonalGaussian
from ._masked_categorical import MaskedCategorical as MaskedCategorical
