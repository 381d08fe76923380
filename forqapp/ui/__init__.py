"""forqapp's HTMX admin pages: dashboard, queue pages, DLQ actions (staff only)."""
