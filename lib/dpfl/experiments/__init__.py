"""The papers' experiments as ``dpfl.runs`` configs: data split, model and training procedure in
one frozen dataclass per run, so that a notebook states a grid in a few lines and every run is
cached by the hash of its config."""
