"""What each layer, model and encoder promises: its symmetry, declared on the module.

As an ``escnn`` module carries its group, every public layer and encoder of
this package carries a ``Symmetry`` (its ``declared_symmetry`` property): the
group, whether the output is invariant or equivariant (SiT paper, section 2:
``f(g x) = f(x)`` or ``f(g x) = g' f(x)``), how the output transforms, and the
transforms that must *change* the output where a symmetry is broken on
purpose (the flips that the triangle sums of SiT eq. 4 / 8 break). The
declaration is read by the registry (``sit_keras.models.registry``),
``sit-check-encoders`` (``sit_keras.encoder_check``), the layer contract test
(``tests/test_layer_contract.py``) and ``docs/layers.md``; nothing else lists
symmetries.

The square's group elements are named once, in ``sit_keras.groups.D4_ELEMENTS``;
a plane group's elements (GSA-Nets) are ``r<a>`` / ``r<a>m`` as in
``sit_keras.groups.group_actions``; permutations of sensors or patches are
named ``"permutation"`` (any element of the symmetric group ``S_N``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sit_keras import graphs
from sit_keras.groups import D4_ELEMENTS, REFLECTION_NAMES, ROTATION_NAMES, get_group

INVARIANT = "invariant"
EQUIVARIANT = "equivariant"
NONE = "none"
KINDS: tuple[str, ...] = (INVARIANT, EQUIVARIANT, NONE)

ACTIONS: dict[str, str] = {
    "image": "(B, H, W, C) images or feature maps; the D4 elements of groups.D4_ELEMENTS about the centre",
    "grid_tokens": "(B, [1 +] H * W, D) tokens of a square grid, class token first; the grid is permuted",
    "group_signal": "(B, H, W, C) images or (B, H, W, |H|, D) signals on the plane group; L_g of groups.py",
    "offsets": "(K, 2) relative (row, col) positions turned by g; the output's group axis moves with g",
    "vector": "(B, D) vectors; no group acts on them (the mlp torso)",
    "sensors": "(B, N[, F]) readings of N sensors (with their per-sensor state); permutations of the N",
    "patches": "(B, N, P, P, k) patches of a screen; permutations of the N",
}
"""What a group acts on, by ``Symmetry.acts_on``."""

PERMUTATION = "permutation"
"""The element name of a symmetric group ``S_N``: any permutation of the sensors or patches."""


@dataclass(frozen=True)
class Symmetry:
    """A module's promised symmetry.

    Args:
      group: the group, in the papers' names: ``"C4"`` (the four rotations of
        the square), ``"D4"`` (rotations and the four reflections), a
        subgroup such as ``"{e, rot180, flip_h, flip_v}"``, a plane group
        ``"p4m"`` (GSA-Nets eq. 17), ``"S_N"`` (permutations), or ``"none"``.
      kind: ``"invariant"``, ``"equivariant"`` or ``"none"`` (no promise), of
        the module as a whole; ``parts`` say which output is which.
      acts_on: a key of ``ACTIONS``: what the group acts on.
      output: how the output transforms, in words.
      elements: the group elements whose action the promise covers exactly
        (D4 names, ``r<a>[m]`` of a plane group, or ``"permutation"``).
      broken: elements that must change the output: a symmetry broken on
        purpose (SiT eq. 4: the triangle sums break the flips).
      parts: ``(part, kind)`` for each output that carries a promise:
        ``"output"`` (the whole output), the keys of ``Encoder.symmetry_parts``
        (``"invariant"``, ``"equivariant"``), or a named output of a
        multi-output layer (``"token"``, ``"patches"``, ``"code"``, ``"state"``).
      reference: the paper's equations or propositions that prove it.
      summary: one line for tables (``sit-check-encoders``); derived if empty.
    """

    group: str
    kind: str
    acts_on: str
    output: str
    elements: tuple[str, ...] = ()
    broken: tuple[str, ...] = ()
    parts: tuple[tuple[str, str], ...] = ()
    reference: str = ""
    summary: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}. Received: kind={self.kind!r}")
        if self.acts_on not in ACTIONS:
            raise ValueError(f"acts_on must be one of {tuple(ACTIONS)}. Received: acts_on={self.acts_on!r}")
        if self.acts_on in ("image", "grid_tokens"):
            unknown = sorted(set(self.elements + self.broken) - set(D4_ELEMENTS))
            if unknown:
                raise ValueError(f"{unknown} are not elements of D4. Expected some of: {tuple(D4_ELEMENTS)}")
        if self.acts_on in ("group_signal", "offsets"):
            names = _plane_group_element_names(self.group)
            unknown = sorted(set(self.elements + self.broken) - set(names))
            if unknown:
                raise ValueError(f"{unknown} are not elements of {self.group!r}. Expected some of: {names}")
        if set(self.elements) & set(self.broken):
            raise ValueError(f"An element cannot be kept and broken: {set(self.elements) & set(self.broken)}")
        if self.kind == NONE and (self.elements or self.parts):
            raise ValueError("A module without a promise keeps no elements and has no symmetric parts.")
        for part, kind in self.parts:
            if kind not in (INVARIANT, EQUIVARIANT):
                raise ValueError(f"Part {part!r} must be invariant or equivariant. Received: {kind!r}")
        if not self.parts and self.kind != NONE:
            object.__setattr__(self, "parts", (("output", self.kind),))
        if not self.summary:
            object.__setattr__(self, "summary", self._summary())

    @property
    def deliberately_broken(self) -> bool:
        """Whether some transforms must change the output (a symmetry broken on purpose)."""
        return bool(self.broken)

    def _summary(self) -> str:
        if self.kind == NONE:
            return NONE
        text = f"{self.group} {self.kind}"
        if set(REFLECTION_NAMES) <= set(self.broken):
            text += ", flips broken"
        elif self.broken:
            text += f", {', '.join(self.broken)} broken"
        return text


def _plane_group_element_names(name: str) -> tuple[str, ...]:
    """``r<a>[m]`` for the non-trivial elements of a plane group (as ``groups.group_actions`` names them)."""
    group = get_group(name)
    return tuple(f"r{a}" + ("m" if b else "") for a, b in group.elements)[1:]


NO_SYMMETRY = Symmetry(
    group="none",
    kind=NONE,
    acts_on="image",
    output="no promise: the features change under rotations and flips (the baselines, SiT Table 2)",
    summary="none",
)
"""The baselines' declaration: a ViT, the IMPALA CNN and the plain CNN keep no symmetry."""


# -- graph symmetries (SiT Listing 2, sit_keras.graphs) ---------------------------------
def _graph_elements(kind: str) -> tuple[str, ...]:
    """The D4 elements that map every graph class of ``kind`` to itself on a square grid."""
    kind = graphs.resolve_symmetry(kind)
    return {
        "rotation": (*ROTATION_NAMES, *REFLECTION_NAMES),  # dy^2 + dx^2
        "chiral": ROTATION_NAMES,
        "flip_hv": ("rot180", "flip_h", "flip_v"),  # (|dy|, |dx|)
        "flip_h": ("flip_h",),  # (dy, |dx|)
        "translation": (),  # (dy, dx): only shifts, which the zero padding breaks at the borders
        "permutation": (*ROTATION_NAMES, *REFLECTION_NAMES),  # self or not: every permutation
    }[kind]


def graph_symmetry(
    kind: str,
    triangles: int,
    square: bool,
    acts_on: str,
    output: str,
    parts: tuple[tuple[str, str], ...] = (),
    chiral_breaks: bool = False,
    reference: str = "SiT eq. 3, 11; Listing 2",
) -> Symmetry:
    """The declaration of a layer whose graph matrices share weights by ``kind`` (``sit_keras.graphs``).

    A grid permutation keeps the layer exactly when it keeps every graph
    class; ``triangles > 0`` (eq. 4 / 8) keeps the rotations among them and
    breaks every reflection (the right turn becomes a left turn). On a
    non-square grid only the elements that map it to itself remain. A
    ``"chiral"`` kernel breaks the reflections once it is large enough to
    hold a chiral pattern (``chiral_breaks``, 5x5 and more).
    """
    elements = _graph_elements(kind)
    broken: tuple[str, ...] = ()
    if triangles:
        broken = tuple(e for e in elements if e in REFLECTION_NAMES)
        elements = tuple(e for e in elements if e in ROTATION_NAMES)
    elif graphs.resolve_symmetry(kind) == "chiral" and chiral_breaks:
        broken = REFLECTION_NAMES
    if not square:  # quarter turns and diagonal reflections move a non-square grid off itself
        keep = ("rot180", "flip_h", "flip_v")
        elements = tuple(e for e in elements if e in keep)
        broken = tuple(e for e in broken if e in keep)
    if not elements:
        return Symmetry(
            group="none", kind=NONE, acts_on=acts_on, output="no D4 element keeps these graphs",
            broken=broken, reference=reference,
        )  # fmt: skip
    kind_of_output = INVARIANT if parts and all(kind == INVARIANT for _, kind in parts) else EQUIVARIANT
    return Symmetry(
        group=_group_name(elements),
        kind=kind_of_output,
        acts_on=acts_on,
        output=output,
        elements=elements,
        broken=broken,
        parts=parts,
        reference=reference + ("; eq. 4 / 8 (triangle sums)" if triangles else ""),
    )


def _group_name(elements: tuple[str, ...]) -> str:
    if set(elements) == set(D4_ELEMENTS):
        return "D4"
    if set(elements) == set(ROTATION_NAMES):
        return "C4"
    return "{e, " + ", ".join(elements) + "}"


# -- the encoders of the registry (SiT paper, section 4, Table 1) ------------------------
_SIT_OUTPUT = "features invariant under the rotations (the class token, Prop. 3.1)"
SIT = Symmetry(
    group="C4",
    kind=INVARIANT,
    acts_on="image",
    output=_SIT_OUTPUT + "; flips change them (triangle sums, eq. 4)",
    elements=ROTATION_NAMES,
    broken=REFLECTION_NAMES,
    parts=(("output", INVARIANT), ("invariant", INVARIANT)),
    reference="SiT section 4, Table 1; Prop. 3.1; eq. 4",
    summary="C4 invariant, flips broken",
)
"""SiT and SiT* with at least two blocks at a level (or a chiral stem): C4 invariant, chiral."""

SIT_MIRROR_BLIND = Symmetry(
    group="D4",
    kind=INVARIANT,
    acts_on="image",
    output=_SIT_OUTPUT + " and flips: no triangle sum reaches the class token (Listing 3)",
    elements=(*ROTATION_NAMES, *REFLECTION_NAMES),
    parts=(("output", INVARIANT), ("invariant", INVARIANT)),
    reference="SiT section 4, Listing 3 (SiTEncoder.mirror_blind)",
    summary="D4 invariant",
)
"""A SiT with one block per level and no chiral stem, and the dihedral SiT (no triangle sum)."""

SET = Symmetry(
    group="C4",
    kind=EQUIVARIANT,
    acts_on="image",
    output="the patch grid (symmetry_parts()['equivariant']) rotates with the input, f(rot x) = rot f(x); "
    "the features read it in order and tell orientations apart",
    elements=ROTATION_NAMES,
    parts=(("equivariant", EQUIVARIANT),),
    reference="SiT section 4, Table 1",
    summary="C4 equivariant patch grid",
)

SIET = Symmetry(
    group="C4",
    kind=EQUIVARIANT,
    acts_on="image",
    output="an invariant class token and a patch grid that rotates with the input; flips change the token",
    elements=ROTATION_NAMES,
    broken=REFLECTION_NAMES,
    parts=(("invariant", INVARIANT), ("equivariant", EQUIVARIANT)),
    reference="SiT section 4, Table 1",
    summary="C4 invariant + equivariant",
)

SET_ROTATION_POOLED = Symmetry(
    group="C4",
    kind=INVARIANT,
    acts_on="image",
    output="the features are invariant: the head reads the patch grid in its four quarter turns and keeps "
    "the largest response; flips change them (a dense readout is chiral)",
    elements=ROTATION_NAMES,
    broken=REFLECTION_NAMES,
    parts=(("output", INVARIANT), ("equivariant", EQUIVARIANT)),
    reference="SiT section 4, Table 1; GSA-Nets Fig. F.1 (pooling over the group)",
    summary="C4 invariant (rotation-pooled patch readout)",
)
"""A SeT whose head reads the patch grid rotation-pooled (``SiTEncoder(patch_readout="rotation_pooled")``)."""

SIET_ROTATION_POOLED = Symmetry(
    group="C4",
    kind=INVARIANT,
    acts_on="image",
    output=SET_ROTATION_POOLED.output,
    elements=ROTATION_NAMES,
    broken=REFLECTION_NAMES,
    parts=(("output", INVARIANT), ("invariant", INVARIANT), ("equivariant", EQUIVARIANT)),
    reference=SET_ROTATION_POOLED.reference,
    summary=SET_ROTATION_POOLED.summary,
)
"""A SieT (or a SiT, from its local grid) whose head reads its class token and a grid rotation-pooled."""

SENSORS = Symmetry(
    group="S_N",
    kind=INVARIANT,
    acts_on="sensors",
    output="the code is invariant under permutations of the N sensors moved with their state; "
    "the new per-sensor state permutes with them",
    elements=(PERMUTATION,),
    parts=(("code", INVARIANT), ("state", EQUIVARIANT)),
    reference="Tang & Ha 2021, eq. 1-2",
)
"""The AttentionNeuron (Tang & Ha) and the sensor encoders and torsos built on it."""

PATCHES = Symmetry(
    group="S_N",
    kind=INVARIANT,
    acts_on="patches",
    output="the code is invariant under permutations of the screen's patches",
    elements=(PERMUTATION,),
    reference="Tang & Ha 2021, eq. 1-2, section 4 (vision tasks)",
)
"""The VisionAttentionNeuron: a shuffled screen gives the same code."""


def plane_group_symmetry(
    group_name: str, kind: str, acts_on: str, output: str, positional_encoding: str = "ge_vit"
) -> Symmetry:
    """The declaration of a GSA-Nets layer or model on the plane group ``Z^2 x| H`` (GSA-Nets eq. 17).

    Exact for every element of a grid-exact ``H`` (``z2``, ``p4``, ``mz2``,
    ``p4m``) on square images; finer rotations (``p8``, ...) hold only up to
    the pixel grid, so no element is promised exactly. GSA-Nets' own encoding
    (GE-ViT eq. 21, ``"gsa_nets"``) is exact only on the centre of a
    non-abelian ``H`` (``{e, r^2}`` of ``p4m``): the other elements break it.
    """
    group = get_group(group_name)
    names = list(_plane_group_element_names(group_name))
    elements: tuple[str, ...] = tuple(names) if group.is_grid_exact else ()
    broken: tuple[str, ...] = ()
    reference = "GSA-Nets Prop. 5.1-5.2, eq. 14, 16; GE-ViT eq. 24-25"
    abelian = bool((group.cayley == group.cayley.T).all())
    if positional_encoding == "gsa_nets" and not abelian and group.is_grid_exact:
        centre = [i for i in range(1, group.order) if all(group.compose(i, j) == group.compose(j, i)
                                                          for j in range(group.order))]  # fmt: skip
        elements = tuple(names[i - 1] for i in centre)
        broken = tuple(n for n in names if n not in elements)
        reference = "GSA-Nets eq. 16 with its eq. 21 encoding (GE-ViT section 4: not equivariant)"
    return Symmetry(
        group=group.name,
        kind=kind,
        acts_on=acts_on,
        output=output,
        elements=elements,
        broken=broken,
        reference=reference,
    )
