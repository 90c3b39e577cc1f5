"""Messages between peers: the runtime's typed messages and the table that turns them into
frames (``messages``), the frame's header (``frame``), its body codecs (``codec``), frames over
one transport message (``fragments``) and the Aeron transport (``aeron``)."""
