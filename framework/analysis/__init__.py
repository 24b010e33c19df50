"""Reading runs for people: compare/history tables, plots, the HTML report."""
