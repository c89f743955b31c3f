"""The console's pages, one module per area of the navigation."""
