"""Built-in tiny models and data sets that work with no network at all."""
