"""Messages between peer groups: the wire format (``frame``) and the Aeron transport (``aeron``)."""
