"""`kata play DEMO`: the demos' options; grader.learn.play_screens draws their screens, printed here."""

from __future__ import annotations

import contextlib
import difflib
import shutil

import click

from grader.cli.options import Finite, check_target, colour, live_terminal

_WEB_OPTIONS = ("--web", "--port", "--no-browser")  # the options of `kata play --web`, which are the group's own

# The demo of each kata's trick: `kata play KATA` runs it, as `kata play DEMO` does.
KATA_DEMOS = {"kv_cache": "cache", "quantization": "quantize", "distillation": "distill", "speculative": "speculate"}


class _PlayGroup(click.Group):
    """`kata play DEMO ...` runs a demo, and so does the name of its kata; `kata play --web ...` serves the
    widgets; otherwise `kata play [PROMPT]` is `kata play write`."""

    def parse_args(self, ctx, args):
        web = any(a.split("=")[0] in _WEB_OPTIONS for a in args)
        if args and args[0] not in self.commands and not web:
            args = _demo_of_a_kata(ctx, args, [c for c in self.commands if c != "write"])
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names and not web):
            demos = [c for c in self.commands if c != "write"]
            near = difflib.get_close_matches(args[0], demos, n=1, cutoff=0.75) if args else []
            if near and args[0].isidentifier():  # one word: a prompt with a space or a sign is text
                raise click.UsageError(
                    f"there is no demo {args[0]!r}; did you mean {near[0]}? "
                    f"(to continue the text {args[0]!r}, say: kata play write {args[0]})",
                    ctx,
                )
            args = ["write", *args]
        return super().parse_args(ctx, args)


def _demo_of_a_kata(ctx, args: list[str], demos: list[str]) -> list[str]:
    """args with a kata's name in front taken for its demo's (said on stderr, with how to have the name
    continued as text instead); a usage error for a kata with no demo; args as they are for anything else."""
    from grader.kata.registry import load_registry

    if not args[0].isidentifier() or args[0] not in {k.name for k in load_registry()}:
        return args  # text with a space or a sign is a prompt
    text = f"to continue the text {args[0]!r}, say: kata play write {args[0]}"
    demo = KATA_DEMOS.get(args[0])
    if demo not in demos:
        raise click.UsageError(f"the kata {args[0]} has no demo ({text}); the demos are: {', '.join(demos)}", ctx)
    click.echo(f"{args[0]} is a kata: its demo is kata play {demo} ({text})", err=True)
    return [demo, *args[1:]]


@click.group("play", cls=_PlayGroup, invoke_without_command=True)
@click.option(
    "--web",
    is_flag=True,
    help="Serve the widgets (cache, quantize, speculate, stack) as pages on 127.0.0.1 instead; Ctrl-C stops it.",
)
@click.option(
    "--port",
    type=click.IntRange(min=1, max=65535),
    default=None,
    help="With --web: the port to listen on (127.0.0.1 only) [default: a free one].",
)
@click.option("--no-browser", is_flag=True, help="With --web: print the page's URL without opening a browser.")
@click.option(
    "--target",
    "web_target",
    default="katas",
    show_default=True,
    help="With --web: whose code the widgets run, as for each demo ('katas', 'reference' or a directory).",
)
@click.pass_context
def play(ctx, web, port, no_browser, web_target):
    """Watch a trick work on the shipped teacher: on your own code once its
    task passes (`kata grade`), on the model's own code before that.

    \b
    kata play [PROMPT]           the teacher (or --model draft) continues your text
    kata play cache [PROMPT]     the same sentence written twice: re-reading everything, then with a KV cache
    kata play moe [PROMPT]       which experts the router sends each character to, and each expert's load
    kata play speculate [PROMPT] the draft guesses, the teacher checks them all in one call
    kata play quantize           one weight snapping to the nearest allowed level as the bits go down
    kata play distill [TEXT]     what the teacher thinks comes next, beside its students
    kata play stack [PROMPT]     the deployed model: one bargain at a time, each measured
    kata play --web              the widgets in your browser: cache, quantize, speculate, stack
    """
    if not web:
        if port is not None or no_browser or ctx.get_parameter_source("web_target").name != "DEFAULT":
            raise click.UsageError("--port, --no-browser and a --target before the demo go with --web", ctx)
        return
    if ctx.invoked_subcommand is not None:
        raise click.UsageError(
            f"--web serves every widget; leave out {ctx.invoked_subcommand!r} and open its page from the index", ctx
        )
    check_target(web_target)
    _serve(web_target, port or 0, browser=not no_browser)


def _serve(target: str, port: int, browser: bool) -> None:
    """`kata play --web`: the URL on a line of its own, the browser opened on it, served until Ctrl-C (exit 0)."""
    import webbrowser

    from grader.learn import web

    try:
        server = web.start(target, port)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {web.HOST} port {port} ({exc.strerror or exc}); choose another --port, "
            "or leave it out for a free one"
        ) from None
    try:
        whose = "your katas (once their tasks pass)" if target == "katas" else target
        click.echo(f"kata play's widgets, on {whose}, at:")
        click.echo(server.url)
        click.echo("Ctrl-C stops the server.", err=True)
        if browser:
            webbrowser.open(server.url)
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped.", err=True)
    finally:
        server.close()


def _positions(text: str) -> list[int]:
    """--at's comma-separated whole numbers, or a usage error naming --at."""
    parts = text.split(",")
    if not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise click.BadParameter(f"{text!r} is not a comma-separated list of whole numbers, such as 7,11,14")
    return [int(p) for p in parts]


class _Refused(click.ClickException):
    """A demo's refusal of what it was asked (a prompt, an option): a usage error, exit 2."""

    exit_code = 2


def _show(lines) -> None:
    """Print a demo's lines as they come (grader.learn.play_screens); a demo that cannot go on ends
    the command with its one line. The demo is closed however printing ends (Ctrl-C, a closed pipe),
    which stops the jails its kata code ran in."""
    from grader.learn.play_screens import DemoError

    try:
        with contextlib.closing(lines):
            for line in lines:
                click.echo(line.text, nl=line.nl, color=colour() if line.painted else None)
    except DemoError as exc:
        raise (_Refused if exc.usage else click.ClickException)(str(exc)) from None


def _play_tokens(default: int):
    """--tokens/-n: how many characters a demo writes."""
    return click.option(
        "--tokens",
        "-n",
        default=default,
        show_default=True,
        type=click.IntRange(min=1),
        help="How many characters to write.",
    )


_PLAY_TARGET = click.option(
    "--target",
    default="katas",
    show_default=True,
    help="Whose code: 'katas' (yours, once its task passes), 'reference' or a directory of kata modules.",
)


def _drafting(tokens: int, prompt: str = "Return the ", k: int = 4):
    """PROMPT, --tokens, --k and --target: what the demos with a draft take."""
    k_option = click.option(
        "--k", "k", default=k, show_default=True, type=click.IntRange(min=1, max=32), help="Draft guesses per round."
    )

    def options(fn):
        return click.argument("prompt", default=prompt)(_play_tokens(tokens)(k_option(_PLAY_TARGET(fn))))

    return options


@play.command("cache")
@click.argument("prompt", default="R")
@_play_tokens(9)
@_PLAY_TARGET
def play_cache(prompt, tokens, target):
    """Write the same sentence twice: re-reading the whole text for every
    character, then remembering it with a KV cache; count the work of each."""
    from grader.learn import play_screens

    columns = shutil.get_terminal_size().columns
    _show(play_screens.cache(prompt, tokens, target, live=live_terminal(), columns=columns))


@play.command("speculate")
@_drafting(40)
def play_speculate(prompt, tokens, k, target):
    """The distilled draft guesses K characters a round, the teacher checks
    them all in one call and keeps what it would have written itself."""
    from grader.learn import play_screens

    _show(play_screens.speculate(prompt, tokens, k, target, live=live_terminal()))


@play.command("quantize")
@click.option(
    "--weight", "name", default="layers.0.wq", show_default=True, help="Which of the teacher's weight matrices."
)
@click.option(
    "--index",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Which weight of it, counted along its input axis (where its groups of 32 run).",
)
@click.option("--prompt", default="Return the ", show_default=True, help="What the quantized teacher continues.")
@_PLAY_TARGET
def play_quantize(name, index, prompt, target):
    """Step one of the teacher's weights down from 8 bits to 2 and watch it
    snap to the nearest allowed level: the error, the teacher's bytes, and
    what the quantized teacher writes, per group of 32 and per tensor."""
    from grader.learn import play_screens

    _show(play_screens.quantize(name, index, prompt, target))


@play.command("distill")
@click.argument("text", default="Return the number of items in the queue.")
@click.option(
    "--at",
    "at",
    default="7,11,14",
    show_default=True,
    callback=lambda ctx, param, value: _positions(value),
    help="Positions of TEXT to show (the characters after them), comma-separated.",
)
@_PLAY_TARGET
def play_distill(text, at, target):
    """What the teacher thinks comes next in TEXT, beside its distilled draft
    and two bigram students your distill_bigram trains on the teacher's soft
    targets and on hard labels alone; how far each student is (KL)."""
    from grader.learn import play_screens

    _show(play_screens.distill(text, at, target))


@play.command("stack")
@_drafting(48, prompt="Return True if the ", k=5)  # grader.learn.play_stack's PROMPT and K (a test holds them equal)
@click.option(
    "--rounds",
    default=5,
    show_default=True,
    type=click.IntRange(min=1, max=100),
    help="Rounds behind each row's speed, taking turns with the row before; x before is the median of their ratios.",
)
def play_stack(prompt, tokens, k, target, rounds):
    """The deployed model the katas end on: the MoE teacher, its weights in
    8 bits, served with a KV cache and speculative decoding from the distilled
    draft. One bargain at a time, each measured in this run."""
    from grader.learn import play_screens

    columns = shutil.get_terminal_size().columns
    _show(play_screens.stack(prompt, tokens, k, target, rounds, columns=columns))


@play.command("moe")
@click.argument("prompt", default="Return the number of items in the queue.")
@click.option("--layer", default=0, show_default=True, type=click.IntRange(min=0), help="Whose router: layer 0, 1, ...")
@_PLAY_TARGET
def play_moe(prompt, layer, target):
    """Colour each character of PROMPT by the experts one layer's router
    sends it to, and set each expert's load against an even split."""
    from grader.learn import play_screens

    _show(play_screens.moe(prompt, layer, target))


@play.command("write")
@click.argument("prompt", default="def ")
@click.option(
    "--model",
    "model_name",
    type=click.Choice(["teacher", "draft"]),
    default="teacher",
    show_default=True,
    help="Which shipped model writes.",
)
@click.option(
    "--tokens", "-n", default=120, show_default=True, type=click.IntRange(min=0), help="How many characters to write."
)
@click.option(
    "--temperature",
    "-t",
    default=0.0,
    show_default=True,
    type=Finite(min=0),
    help="0 writes greedily; higher is more adventurous.",
)
@click.option(
    "--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed for sampling at temperature > 0."
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Generate the naive way, re-reading the whole text for every character, to feel the difference.",
)
def play_write(prompt, model_name, tokens, temperature, seed, no_cache):
    """Let a shipped model continue PROMPT, and say how fast it wrote (`kata play PROMPT` does this too)."""
    from grader.learn import play_screens

    try:
        text, speed = play_screens.write(prompt, model_name, tokens, temperature, seed, no_cache)
    except play_screens.DemoError as exc:
        raise (_Refused if exc.usage else click.ClickException)(str(exc)) from None
    click.echo(text)
    click.echo(speed, err=True)
