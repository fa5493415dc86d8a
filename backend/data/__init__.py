"""What a dataset is: its files checked (files.py), its rows read bounded (records.py), the format-free
first look (first_look.py), and swift's own view of it (swift_view*.py: what swift keeps, drops and
encodes, asked in the oracle's child) with the row view shown in the Data tab (view.py).
"""
