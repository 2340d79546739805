"""PostgreSQL's pgoutput protocol: its messages (``messages``), relations mapped onto the set's
tables (``relations``), streamed in-progress transactions (``stream``), rows that joined or left a
table without a change (``rows``), and the decoder of it all into relay items (``decoder``)."""
