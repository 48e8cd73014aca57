"""`gbatch tui`: a full-screen client of the daemon (textual).

Only `gbatch tui` imports this package's screens; `data` and `rows` import no
textual, so they can be tested and reused without it.
"""
