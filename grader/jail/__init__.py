"""The untrusted side: the jail process that imports a learner's module, and its confinement; imports only wire/."""
