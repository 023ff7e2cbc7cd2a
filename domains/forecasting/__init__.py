"""Time-series forecasting (`titans_seq.domains.forecasting`): Simba-style Titans forecaster."""

from .estimator import TitansForecaster
from .model import SimbaForecaster

__all__ = ["SimbaForecaster", "TitansForecaster"]
