"""``the-loop keys``: the review-record signing key (see docs/security.md, "Signed review
records").

``generate`` makes an Ed25519 key pair: the private key goes to a file of mode 0600 that
only the service reads (``THE_LOOP_SIGNING_KEY_FILE``), never printed; the public key is
printed, and with ``--publish DIR`` added to that checkout's ``.the-loop/keys/records.pub``
(commit it to the default branch). ``show`` prints the public half of the configured key;
``publish OWNER/NAME`` commits it to a repository's default branch through the worker's
GitHub client (kept keys stay).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from foundation.signing import ENV_SIGNING_KEY_FILE, KEYS_PATH, publish
from graph.signing import Signer
from the_loop.cli.base import emit, main, read_settings


def write_private_key(path: Path, signer: Signer) -> None:
    """Write ``signer``'s private key to ``path`` (created with mode 0600; never
    overwritten).

    Raises:
        FileExistsError: ``path`` exists.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(signer.private_pem())


@main.group("keys")
def keys() -> None:
    """The signing key of review records."""


@keys.command("generate")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="File for the private key (mode 0600; must not exist). Point "
                   f"{ENV_SIGNING_KEY_FILE} at it.")
@click.option("--publish", "repo", type=click.Path(file_okay=False, path_type=Path),
              default=None, help=f"A checkout whose {KEYS_PATH} gets the public key.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def generate(out: Path, repo: Path | None, as_json: bool) -> None:
    """Make a new Ed25519 signing key pair; print its key id and public key."""
    signer = Signer.generate()
    try:
        write_private_key(out, signer)
    except FileExistsError:
        raise click.ClickException(f"{out} exists: choose another --out (a key is never "
                                   "overwritten)") from None
    published = str(publish(repo, signer)) if repo is not None else None
    if as_json:
        emit("keys-generate", True, "generated", key_id=signer.key_id, private_key=str(out),
             public_key=signer.public_pem(), published=published)
        return
    click.echo(f"key {signer.key_id}: private key in {out} (set {ENV_SIGNING_KEY_FILE}="
               f"{out} for the worker and the commands)")
    if published:
        click.echo(f"public key added to {published}: commit it to the default branch")
    else:
        click.echo(f"public key (add it to {KEYS_PATH} on the default branch):")
    click.echo(signer.public_pem().rstrip("\n"))


@keys.command("show")
def show() -> None:
    """Print the key id and public key of the configured signing key."""
    signer = read_settings().worker.signer
    if signer is None:
        raise click.ClickException(f"no signing key: set {ENV_SIGNING_KEY_FILE} (make one "
                                   "with `the-loop keys generate --out FILE`)")
    click.echo(f"key {signer.key_id}")
    click.echo(signer.public_pem().rstrip("\n"))


@keys.command("publish")
@click.argument("repository")
@click.option("--installation", type=int, default=None,
              help="The App installation on the repository (a token needs none).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def publish_remote(repository: str, installation: int | None, as_json: bool) -> None:
    """Add the configured key's public half to REPOSITORY's .the-loop/keys/records.pub on
    its default branch (one commit; nothing when it is there already)."""
    from foundation.signing import SigningKeyError, trusted_keys
    from graph.ports import IntegrationError, NotFound
    from the_loop.cli.base import open_operator
    from the_loop.wiring import NoGitHubClient

    operator = open_operator()
    signer = operator.settings.worker.signer
    if signer is None:
        raise click.ClickException(f"no signing key: set {ENV_SIGNING_KEY_FILE} (make one "
                                   "with `the-loop keys generate --out FILE`)")
    try:
        github = operator.hook_config(installation).github
        if github is None:
            raise NoGitHubClient("no GitHub transport is configured")
        branch = github.get_repository(repo=repository)["default_branch"]
        try:
            current = github.get_file(repo=repository, path=KEYS_PATH, ref=branch)
            text, sha = str(current["text"]), str(current["sha"])
        except NotFound:
            text, sha = "", None
        if signer.key_id in trusted_keys(text, f"{repository}:{KEYS_PATH}", None):
            status = "published-already"
        else:
            text = (text.rstrip("\n") + "\n" if text.strip() else "") + signer.public_pem()
            github.put_file(repo=repository, path=KEYS_PATH, branch=branch, text=text,
                            sha=sha, message="the-loop: publish the review-record key "
                                             f"{signer.key_id}")
            status = "published"
    except (NoGitHubClient, IntegrationError, SigningKeyError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit("keys-publish", True, status, key_id=signer.key_id, repository=repository,
             branch=branch, path=KEYS_PATH)
        return
    click.echo(f"key {signer.key_id}: {status.replace('-', ' ')} in {repository} "
               f"({KEYS_PATH} on {branch})")
