"""Discrete-event simulator of LLM serving clusters driven by output-length predictions."""

from analysis.serving.cost_model import DEFAULT_COST, CostModel, LinearCost, fit_cost_model
from analysis.serving.engine import SimConfig, SimResult, simulate
from analysis.serving.registry import make_predictor

__all__ = ["DEFAULT_COST", "CostModel", "LinearCost", "SimConfig", "SimResult", "fit_cost_model",
           "make_predictor", "simulate"]
