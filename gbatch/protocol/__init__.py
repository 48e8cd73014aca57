"""What the daemon and its clients exchange over the socket, and the client's side of it.

Request types, the JSON codec, listings, and the client's side of the socket.
"""
