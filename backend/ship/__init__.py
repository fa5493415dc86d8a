"""Shipping a trained model: merged / Ollama export with its pipeline (export_model.py) and the parity
check of the export against the checkpoint (parity.py).
"""
