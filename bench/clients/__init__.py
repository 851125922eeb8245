"""Load generators: the compiled echo client and the wrk report script."""
