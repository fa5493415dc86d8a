"""Chatting with a model, tokens streaming in: the client (client.py), the worker that holds the model
(worker.py, imports swift; only in its own process) and the JSON-lines protocol between them (protocol.py).
"""
