# tests/model: the Promela model of the slot protocol (make model)
