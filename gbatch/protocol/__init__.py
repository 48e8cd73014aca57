"""What the daemon and its clients exchange over the socket: request types, the JSON codec,
listings, and the client's side of the socket."""
