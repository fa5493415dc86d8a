"""What a model is: references resolved (refs.py: built-in, local path, HF/ModelScope cache, hub id,
merged model), the registry of what swift knows (registry.py), the shape of a decoder (shape.py, from
config.json in shape_formula.py or exactly from transformers in shape_exact.py) and the built-in tiny
model (demo/).
"""
