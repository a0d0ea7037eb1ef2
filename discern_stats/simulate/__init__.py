"""Synthetic respondents (SIMULATORS with known weights) and a loopback OpenAI-format server."""
