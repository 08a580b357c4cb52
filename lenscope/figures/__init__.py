"""Plotly figure builders: pure functions from analysis results to go.Figure."""
