"""Reading runs for people: compare/history tables, plots, the interactive
offline HTML report, the live local dashboard and the TensorBoard export
(optional extras ``report`` and ``tensorboard``)."""
