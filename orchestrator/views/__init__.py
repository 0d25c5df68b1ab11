"""Views: documents of what commands print (tables), the one writer of tables / JSON / CSV / Markdown
(output), the HTML report, and the live view of a running sweep."""
