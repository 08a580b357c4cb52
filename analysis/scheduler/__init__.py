"""Discrete-event simulator of LLM serving clusters driven by output-length predictions."""

from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel, LinearCost, fit_cost_model
from lenscope.analysis.scheduler.engine import SimConfig, SimResult, simulate
from lenscope.analysis.scheduler.registry import make_predictor

__all__ = ["DEFAULT_COST", "CostModel", "LinearCost", "SimConfig", "SimResult", "fit_cost_model",
           "make_predictor", "simulate"]
