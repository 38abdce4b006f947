"""The kv_cache suite catches every mistake issue 4 lists (one mutant of the
reference solution each, plus a few more), and gives full marks to a
different correct implementation: tests/fixtures/alt/kv_cache.py, which grows
its buffers by concatenation."""

from __future__ import annotations

from mutation import Mutant, alternative_test, mutant_test

KATA = "kv_cache"

CHECK_AND_WRITE = """        if start + t > self.max_len:
            raise CacheFullError(
                f"the cache holds {start} tokens and fits max_len={self.max_len}, so {t} more do not fit; "
                "crop it or make a cache with a larger max_len"
            )
        end = start + t
        self._k[layer, :, start:end] = k
        self._v[layer, :, start:end] = v
"""

MUTANTS = [
    # The mistakes the issue lists.
    Mutant(
        name="new tokens start at position 0",
        task="forward",
        old="positions = np.arange(start, start + t)",
        new="positions = np.arange(t)",
    ),
    Mutant(
        name="new tokens start at position len + 1",
        task="forward",
        old="positions = np.arange(start, start + t)",
        new="positions = np.arange(start + 1, start + t + 1)",
    ),
    Mutant(
        name="update returns only the new keys and values",
        task="cache",
        old="return self._k[layer, :, :end], self._v[layer, :, :end]",
        new="return self._k[layer, :, start:end], self._v[layer, :, start:end]",
    ),
    Mutant(
        name="update reads the keys along the heads axis",
        task="cache",
        old="return self._k[layer, :, :end],",
        new="return self._k[layer, :end],",
    ),
    Mutant(
        name="prefill does not store its keys and values",
        task="forward",
        old="k_all, v_all = cache.update(layer, k, v)",
        new="k_all, v_all = cache.update(layer, k, v) if t == 1 else (k, v)",
    ),
    Mutant(
        name="crop leaves the last layer's length unchanged",
        task="cache",
        old="self._filled = [int(n)] * self.n_layers",
        new="self._filled[:-1] = [int(n)] * (self.n_layers - 1)",
    ),
    Mutant(
        name="crop leaves every length unchanged",
        task="cache",
        old="self._filled = [int(n)] * self.n_layers",
        new="self._filled = list(self._filled)",
    ),
    Mutant(
        name="writing past max_len silently truncates",
        task="cache",
        old=CHECK_AND_WRITE,
        new="""        t = min(t, self.max_len - start)
        end = start + t
        self._k[layer, :, start:end] = k[:, :t]
        self._v[layer, :, start:end] = v[:, :t]
""",
    ),
    Mutant(
        name="writing past max_len wraps around",
        task="cache",
        old=CHECK_AND_WRITE,
        new="""        slots = np.arange(start, start + t) % self.max_len
        end = min(start + t, self.max_len)
        self._k[layer][:, slots] = k
        self._v[layer][:, slots] = v
""",
    ),
    # More mistakes worth catching.
    Mutant(
        name="len advances after the first layer's update",
        task="cache",
        old="return min(self._filled)",
        new="return max(self._filled)",
    ),
    Mutant(
        name="nbytes counts only the keys",
        task="cache",
        old="return int(self._k.nbytes + self._v.nbytes)",
        new="return int(self._k.nbytes)",
    ),
    Mutant(
        name="a negative layer index is accepted",
        task="cache",
        old="layer = _check_layer(layer, self.n_layers)\n"
        "        k, v = _check_kv(k, v, self.n_kv_heads, self.head_dim)\n        start",
        new="layer = int(layer)\n        k, v = _check_kv(k, v, self.n_kv_heads, self.head_dim)\n        start",
    ),
    Mutant(
        name="the first token is sampled from the first row of the prefill",
        task="generate",
        old="logits = forward_cached(model, prompt, cache)[-1]",
        new="logits = forward_cached(model, prompt, cache)[0]",
    ),
    Mutant(
        name="decode steps recompute the whole sequence",
        task="generate",
        old="logits = forward_cached(model, [token], cache)[-1]",
        new="logits = model.forward(list(prompt) + new)[-1]",
    ),
    Mutant(
        name="freed blocks are never given back",
        task="paged",
        old="self._free.extend(reversed(self._tables.pop(seq_id)))",
        new="self._tables.pop(seq_id)",
    ),
    Mutant(
        name="every sequence takes the same free block",
        task="paged",
        old="table.append(self._free.pop())",
        new="table.append(self._free[-1])",
    ),
    Mutant(
        name="update copies the past it returns",
        task="speed",
        old="return self._k[layer, :, :end], self._v[layer, :, :end]",
        new="return self._k[layer, :, :end].copy(), self._v[layer, :, :end].copy()",
        expect=("slow",),
    ),
]

# A mistake the preallocating reference cannot make: concatenating along the heads axis.
ALT_MUTANTS = [
    Mutant(
        name="keys are concatenated along the heads axis",
        task="cache",
        old="[self.keys[layer], k.astype(self.dtype)], axis=1)",
        new="[self.keys[layer], k.astype(self.dtype)], axis=0)",
    ),
]

test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
test_grader_does_not_pass_the_mutant_of_the_alternative = mutant_test(KATA, ALT_MUTANTS, of_alternative=True)
test_a_cache_grown_by_concatenation_gets_full_marks_on_every_task_but_speed = alternative_test(KATA)
