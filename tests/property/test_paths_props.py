"""Hypothesis: paths round-trip for any valid input; invalid names never reach a path."""

import string

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource, ResourcePath
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import validate_name, validate_namespace

LABEL_CHARS = string.ascii_lowercase + string.digits
labels = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
groups = st.one_of(
    st.just(""),
    st.lists(labels, min_size=1, max_size=4).map(".".join),
)
NAME_CHARS = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@"
names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=253).filter(
    lambda n: n not in (".", "..")
)


@st.composite
def resource_paths(draw: st.DrawFn) -> ResourcePath:
    gvr = GroupVersionResource(draw(groups), draw(labels), draw(labels))
    namespace = draw(st.none() | labels)
    name = draw(st.none() | names)
    subresource = draw(st.none() | labels) if name is not None else None
    if gvr.resource == "namespaces":
        namespace = None
        subresource = draw(st.sampled_from([None, "status", "finalize"])) if name else None
    return ResourcePath(gvr, namespace, name, subresource)


@given(resource_paths())
def test_any_valid_path_parses_back_to_itself(path: ResourcePath) -> None:
    rendered = path.render()
    assert "?" not in rendered and "#" not in rendered and "%" not in rendered
    assert ResourcePath.parse(rendered) == path


# A name is unsafe if it holds any character outside the path-segment alphabet.
unsafe_chars = st.characters(blacklist_characters=NAME_CHARS, blacklist_categories=("Cs",))
unsafe_names = st.builds(
    lambda prefix, bad, suffix: prefix + bad + suffix,
    st.text(alphabet=NAME_CHARS, max_size=10),
    unsafe_chars,
    st.text(alphabet=NAME_CHARS, max_size=10),
)


@given(unsafe_names)
def test_names_with_unsafe_characters_are_rejected(name: str) -> None:
    try:
        validate_name(name)
    except LocalProtocolError:
        return
    raise AssertionError(f"{name!r} was accepted")


@given(st.text(alphabet=NAME_CHARS, min_size=254, max_size=300))
def test_overlong_names_are_rejected(name: str) -> None:
    try:
        validate_name(name)
    except LocalProtocolError:
        return
    raise AssertionError("an overlong name was accepted")


@given(st.text(max_size=70))
def test_namespaces_are_exactly_dns_labels(value: str) -> None:
    is_label = (
        0 < len(value) <= 63
        and all(c in LABEL_CHARS + "-" for c in value)
        and value[0] != "-"
        and value[-1] != "-"
    )
    try:
        validate_namespace(value)
    except LocalProtocolError:
        assert not is_label
    else:
        assert is_label


@given(st.text(max_size=60))
def test_parse_never_raises_a_foreign_exception(path: str) -> None:
    try:
        ResourcePath.parse("/" + path)
    except LocalProtocolError:
        pass
