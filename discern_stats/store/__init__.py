"""The store: the trial database (`db`), the interchange schema (`tables`), importers, exporters and
the `TrialDB` facade. Every other layer reads and writes trials through it."""
