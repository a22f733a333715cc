"""`turnledger serve`: the client API (history, user turns, dispatch, cancel), a resumable SSE stream per
conversation read from the projector's live event streams, and a web page served from package data."""
