"""Functional operators (fla-style: `ops/<op>/{reference,chunked,...}.py` + dispatch)."""
