"""What runs inside swift's training process: the callback that writes events, and its parts.
Imports only backend.contract and backend.core."""
