"""What the relay reports: Prometheus metrics (``metrics``), progress lines and lag (``progress``),
its connections' state (``connections``) and a logical set's heartbeat action query
(``heartbeat``)."""
