"""Closed-form analyses and numerical checks of the papers' theorems (no training)."""
