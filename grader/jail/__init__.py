"""The untrusted side: wire protocol, jail server, jail zygote, confinement; imports nothing from grader.grading."""
