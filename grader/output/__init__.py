"""What the grader writes: reports, Gradescope results, the one atomic file writer, the key and HMAC of its seals."""
