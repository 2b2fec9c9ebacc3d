"""The registry of table layouts: one entry per quantitative table of the paper.

Names, row order, labels, column structure and each float's ``\\tabcolsep`` and
``\\arraystretch`` follow ``paper/vmfproto.tex``; the LaTeX
label of each layout is the paper's, so ``\\cref`` in a manuscript keeps working.
"""
from __future__ import annotations


from benchmark.errors import ProtobenchError, did_you_mean
from reports.layout import BEST_NOTE, BodyItem, ColumnGroup, Heading, Layout, Metric, Row, Rule, Text, text

CON = Metric("con", text("Con."))
STA = Metric("sta", text("Sta."))
DIS = Metric("dis", text("Dis."))
ACC = Metric("acc", text("Acc."))
EXPLANATION_AND_ACC = (CON, STA, DIS, ACC)
# the metrics beyond the paper (docs/protocol/metrics.md, "Metrics beyond the paper"); explanation sizes are
# numbers of prototypes (smaller is easier to read), del is in percent points
COMP = Metric("comp", text("Comp."))
PURITY = Metric("purity", text("Purity"))
LOC = Metric("loc", text("Loc."))
SIZE_LOCAL = Metric("size_local", text("Size (local)"), higher_is_better=False)
SIZE_GLOBAL = Metric("size_global", text("Size (global)"), higher_is_better=False, decimals=0)
DELETION = Metric("del", text("Del."))
SANITY = Metric("sanity", text("Sanity"))
SANITY_SIGNED = Metric("sanity_signed", text("Sanity (signed)"))  # beside sanity, on request (issue 55)
BEYOND_THE_PAPER = (COMP, PURITY, LOC, SIZE_LOCAL, SIZE_GLOBAL, DELETION, SANITY)
# The paper's epoch time runs the frozen trunk at every step; ours also from the token cache.
EPOCH_TIME = Metric("epoch_seconds_live_trunk", text("Epoch time (s)"), higher_is_better=False)
CACHED_EPOCH_TIME = Metric("epoch_seconds", text("Epoch from cache (s)"), higher_is_better=False)
THROUGHPUT = Metric("inference_images_per_second", text("Inference (img/s)"))

VMFPROTO = Text(md="vMFProto", tex=r"\textsc{vMFProto}")
METHODS: tuple[tuple[str, Text], ...] = (
    ("protopnet", text("ProtoPNet")),
    ("deformable_protopnet", text("Def. ProtoPNet")),
    ("tesnet", text("TesNet")),
    ("evalprotopnet", text("EvalProtoPNet")),
    ("mgproto", text("MGProto")),
    ("nppp", text("NPPP")),
    ("vmfproto", VMFPROTO),
)
BASELINES = METHODS[:5]


def display_name(method: str, recorded: str | None) -> str:
    """A method's label in every report: the display name its result.json recorded (the adapter's
    ``display_name`` when the run finished); else, for a result written before results recorded it
    or a run still training, the paper's label of a suite method (:data:`METHODS`, the adapters'
    display names: tests/benchmark/test_run_identity.py), or an import path's class name. Reports never
    import a method."""
    return recorded or next((label.md for key, label in METHODS if key == method), method.rpartition(":")[2])
J_SWEEP = (3, 5, 7)

BACKBONES: tuple[tuple[str, str, str], ...] = (
    # key, long label (CUB tables), short label (Dogs/Cars tables)
    ("dinov2_vitb14", "DINOv2 ViT-B/14", "DINOv2 B/14"),
    ("dinov2_vits14", "DINOv2 ViT-S/14", "DINOv2 S/14"),
    ("dinov3_vitb16", "DINOv3 ViT-B/16", "DINOv3 B/16"),
    ("dinov3_vits16", "DINOv3 ViT-S/16", "DINOv3 S/16"),
)
ALL_BACKBONES = tuple(key for key, _, _ in BACKBONES)
B_BACKBONES = ("dinov2_vitb14", "dinov3_vitb16")
S_BACKBONES = ("dinov2_vits14", "dinov3_vits16")
ANCHOR = {"backbone": "dinov2_vitb14", "J": 5}  # the CUB anchor setting of the ablations
NO_LABEL = (text(""),)



def _caption(title: str, body: str, *, best_within: str | None = None, tex_body: str | None = None) -> Text:
    md = f"**{title}** {body}"
    tex = f"\\textbf{{{text(title).tex}}} {tex_body if tex_body is not None else text(body).tex}"
    if best_within is not None:
        md += " " + BEST_NOTE.md.replace("{scope}", best_within)
        tex += " " + BEST_NOTE.tex.replace("{scope}", best_within)
    return Text(md=md, tex=tex)


def _method_sweep() -> tuple[BodyItem, ...]:
    """Method × J rows, ``ProtoPNet (J=3)``, with a rule between methods."""
    items: list[BodyItem] = []
    for method, label in METHODS:
        if items:
            items.append(Rule())
        items.extend(
            Row((label,), {"method": method, "J": j}, qualifier=text(f" (J={j})")) for j in J_SWEEP
        )
    return tuple(items)


def _backbone_groups(
    keys: tuple[str, ...], *, short: bool, metrics: tuple[Metric, ...]
) -> tuple[ColumnGroup, ...]:
    labels = {key: (short_label if short else long_label) for key, long_label, short_label in BACKBONES}
    return tuple(ColumnGroup(text(labels[key]), {"backbone": key}, metrics) for key in keys)


def _accuracy_sweep(
    name: str, dataset: str, title: str, backbones: tuple[str, ...], tex_label: str
) -> Layout:
    """Dogs/Cars tables: methods × J rows, one accuracy column per backbone."""
    return Layout(
        name=name,
        description=f"{title} top-1 accuracy for every method × J (rows), one column per backbone",
        caption=_caption(
            f"{title} accuracy (%).",
            "Same method/J sweep as the CUB comparison.",
            tex_body=r"Same method/\(J\) sweep as the CUB comparison.",
            best_within="backbone column",
        ),
        tex_label=tex_label,
        dataset=dataset,
        filters={"variant": "default"},
        label_headers=NO_LABEL,
        label_align=("l",),
        columns=_backbone_groups(backbones, short=True, metrics=(ACC,)),
        body=_method_sweep(),
        wide=True,
        resize=len(backbones) > 2,
        tabcolsep="3.4pt",
        arraystretch="1.02",
    )


def _seed_robustness_body() -> tuple[BodyItem, ...]:
    items: list[BodyItem] = []
    for key, long_label, _ in BACKBONES:
        if items:
            items.append(Rule())
        items.append(Heading(text(long_label), align="c", style="bold", level=0))
        for method, label, style in (("nppp", text("NPPP"), "emph"), ("vmfproto", VMFPROTO, "plain")):
            items.append(Heading(label, align="l", style=style, level=1))
            items.extend(
                Row((text(str(j)),), {"backbone": key, "method": method, "J": j}) for j in J_SWEEP
            )
    return tuple(items)


def _variant_rows(rows: tuple[tuple[Text, str], ...]) -> tuple[Row, ...]:
    return tuple(Row((label,), {"variant": variant}) for label, variant in rows)


def _protocol_pairs(
    methods: tuple[tuple[str, Text], ...], settings: tuple[tuple[str, str], ...]
) -> tuple[BodyItem, ...]:
    """Method × setting rows (two label columns), a rule between methods."""
    items: list[BodyItem] = []
    for method, label in methods:
        if items:
            items.append(Rule())
        items.extend(
            Row((label, text(setting)), {"method": method, "variant": variant})
            for setting, variant in settings
        )
    return tuple(items)


_CUB_MAIN = Layout(
    name="cub_main",
    description="CUB Con./Sta./Dis./Acc. for every method × J (rows) on four backbones (Table 1)",
    caption=_caption(
        "CUB comparison and seed robustness.",
        "Consistency, stability, distinctiveness and classification accuracy (%) across four "
        "backbones and J ∈ {3, 5, 7}.",
        tex_body=r"Consistency (\%), stability (\%), distinctiveness (\%), and classification "
        r"accuracy (\%) across four backbones and $J\in\{3,5,7\}$.",
        best_within="backbone/metric",
    ),
    tex_label="tab:cub_main",
    dataset="cub",
    filters={"variant": "default"},
    label_headers=NO_LABEL,
    label_align=("l",),
    columns=_backbone_groups(ALL_BACKBONES, short=False, metrics=EXPLANATION_AND_ACC),
    body=_method_sweep(),
    rule_between_groups=True,
    wide=True,
    resize=True,
    tabcolsep="1.8pt",
    arraystretch="1.04",
)

_SEED_ROBUSTNESS = Layout(
    name="seed_robustness",
    description="CUB mean±std over seeds for NPPP and vMFProto, per backbone and J (supplementary)",
    caption=_caption(
        "Seed robustness on CUB-200-2011.",
        "Entries report mean±standard deviation over seeds.",
        tex_body=r"Entries report mean$\pm$standard deviation over seeds.",
    ),
    tex_label="tab:supp_seed_robustness",
    dataset="cub",
    filters={"variant": "default"},
    label_headers=(Text("J", "$J$"),),
    label_align=("c",),
    columns=(ColumnGroup(None, {}, EXPLANATION_AND_ACC),),
    body=_seed_robustness_body(),
    mark_best=False,
    show_std=True,
    tabcolsep="3.0pt",
    arraystretch="1.02",
)

_ABLATION = Layout(
    name="ablation",
    description="vMFProto loss-term, stage-2 and fixed-κ ablations on CUB, DINOv2 ViT-B/14, J=5 (Table 2)",
    caption=_caption(
        "Ablations on the CUB anchor setting.",
        "vMFProto variants on CUB-200-2011 with a DINOv2 ViT-B/14 backbone and J = 5 prototypes per "
        "class: Consistency, Stability, Distinctiveness and accuracy (%).",
        tex_body=r"\textsc{vMFProto} variants on CUB-200-2011 with a DINOv2 ViT-B/14 backbone and "
        r"$J{=}5$ prototypes per class: Consistency, Stability, Distinctiveness, and accuracy (\%).",
    ),
    tex_label="tab:cub_ablation",
    dataset="cub",
    filters={**ANCHOR, "method": "vmfproto"},
    label_headers=(text("Setting"),),
    label_align=("l",),
    columns=(ColumnGroup(None, {}, EXPLANATION_AND_ACC),),
    body=(
        Row((Text("vMFProto (full)", r"\textsc{vMFProto} (full)"),), {"variant": "default"}),
        Rule(),
        Heading(text("Loss terms")),
        *_variant_rows(
            (
                (Text("L_CE only", r"$\mathcal{L}_{\text{CE}}$ only"), "ce_only"),
                (Text("L_CE + L_ppd", r"$\mathcal{L}_{\text{CE}}{+}\mathcal{L}_{\text{ppd}}$"), "ce_ppd"),
                (
                    Text("L_CE + L_logdet", r"$\mathcal{L}_{\text{CE}}{+}\mathcal{L}_{\text{logdet}}$"),
                    "ce_logdet",
                ),
            )
        ),
        Rule(),
        Heading(text("Stage-2 prototype learning")),
        *_variant_rows(((text("Stage-2 off"), "stage2_off"),)),
        Rule(),
        Heading(Text("Learning κ", r"Learning $\kappa$")),
        *_variant_rows(
            (
                (Text("Fixed κ=5", r"Fixed $\kappa=5$"), "kappa_fixed_5"),
                (Text("Fixed κ=1", r"Fixed $\kappa=1$"), "kappa_fixed_1"),
            )
        ),
    ),
    mark_best=False,
    rule_after_labels=False,
    tabcolsep="3.8pt",
    arraystretch="1.06",
)

_GATING = Layout(
    name="gating",
    description="vMFProto foreground-gating ablation on CUB, DINOv2 ViT-B/14, J=5 (supplementary)",
    caption=_caption(
        "Foreground gating ablation for vMFProto.",
        "Con., Sta., Dis., and Acc. are reported in %.",
        tex_body=r"Con., Sta., Dis., and Acc. are reported in \%.",
    ),
    tex_label="tab:fg_ablation_supp",
    dataset="cub",
    filters={**ANCHOR, "method": "vmfproto"},
    label_headers=(text("Foreground gating"),),
    label_align=("l",),
    columns=(ColumnGroup(None, {}, EXPLANATION_AND_ACC),),
    body=_variant_rows(
        (
            (
                Text("Attention→PCA refine (default)", r"Attention$\rightarrow$PCA refine (default)"),
                "default",
            ),
            (text("PCA only"), "gating_pca"),
            (text("Attention only"), "gating_attention"),
            (text("None"), "gating_none"),
        )
    ),
    mark_best=False,
    tabcolsep="3.4pt",
    arraystretch="1.02",
)

_OFFLINE_AUG = Layout(
    name="offline_aug",
    description="every method without/with 40× offline augmentation, CUB, DINOv2 ViT-B/14, J=5 (supplementary)",
    caption=_caption(
        "Effect of offline data augmentation across methods.",
        "Con., Sta., Dis., and Acc. are reported in % for CUB-200-2011 (DINOv2 ViT-B/14, J = 5).",
        tex_body=r"Con., Sta., Dis., and Acc. are reported in \% for CUB-200-2011 "
        r"(DINOv2 ViT-B/14, $J{=}5$).",
    ),
    tex_label="tab:offline_aug_all_supp",
    dataset="cub",
    filters=ANCHOR,
    label_headers=(text("Method"), text("Offline aug.")),
    label_align=("l", "l"),
    columns=(ColumnGroup(None, {}, EXPLANATION_AND_ACC),),
    body=_protocol_pairs(METHODS, (("No", "default"), ("Yes", "offline_aug"))),
    mark_best=False,
    wide=True,
    tabcolsep="3.4pt",
    arraystretch="1.02",
)

_EXPANDED = Layout(
    name="expanded",
    description="baselines: default vs expanded-backbone protocol, CUB, DINOv2 ViT-B/14, J=5 (supplementary)",
    caption=_caption(
        "Expanded-backbone protocol comparison on CUB-200-2011 (DINOv2 ViT-B/14, J = 5).",
        "Con., Sta., Dis., and Acc. are reported in %. For NPPP and vMFProto, only the default "
        "configuration is listed.",
        tex_body=r"Con., Sta., Dis., and Acc. are reported in \%. For NPPP and \textsc{vMFProto}, "
        r"only the default configuration is listed.",
    ),
    tex_label="tab:expanded_backbone_ablation_supp",
    dataset="cub",
    filters=ANCHOR,
    label_headers=(text("Method"), text("Protocol")),
    label_align=("l", "l"),
    columns=(ColumnGroup(None, {}, EXPLANATION_AND_ACC),),
    body=(
        *_protocol_pairs(BASELINES, (("Default", "default"), ("Expanded", "expanded"))),
        Rule(),
        *_protocol_pairs(METHODS[5:], (("Default", "default"),)),
    ),
    mark_best=False,
    wide=True,
    tabcolsep="3.0pt",
    arraystretch="1.02",
)

_RUNTIME = Layout(
    name="runtime",
    description="epoch time and inference throughput of NPPP and vMFProto, CUB, DINOv2 ViT-B/14, J=5 (supplementary)",
    caption=_caption(
        "Training and inference cost on CUB-200-2011.",
        "DINOv2 ViT-B/14 with J = 5. Epoch time is the mean wall-clock time of a training epoch "
        "with the frozen trunk's forward at every step (as the paper); epoch from cache is the same "
        "epoch reading the token cache; inference is forward-only throughput.",
        tex_body=r"DINOv2 ViT-B/14 with $J{=}5$. Epoch time is the mean wall-clock time of a "
        r"training epoch with the frozen trunk's forward at every step (as the paper); epoch from "
        r"cache is the same epoch reading the token cache; inference is forward-only throughput.",
    ),
    tex_label="tab:supp_runtime",
    dataset="cub",
    filters={**ANCHOR, "variant": "runtime"},  # benchmark/grids/runtime.toml
    label_headers=(text("Method"),),
    label_align=("l",),
    columns=(ColumnGroup(None, {}, (EPOCH_TIME, CACHED_EPOCH_TIME, THROUGHPUT)),),
    body=tuple(Row((label,), {"method": method}) for method, label in METHODS[5:]),
    mark_best=False,
    rule_after_labels=False,
    tabcolsep="5.0pt",
)

_EXPLANATIONS = Layout(
    name="explanations",
    description="every explanation metric (paper's and beyond) and accuracy for every method × J, CUB, DINOv2 ViT-B/14",
    caption=_caption(
        "Explanation metrics on CUB-200-2011.",
        "DINOv2 ViT-B/14. Consistency, stability, distinctiveness, comprehensiveness, purity and "
        "localisation (%), local and global explanation size (prototypes), prototype-deletion "
        "faithfulness (accuracy points), the model-randomisation sanity check (%) and accuracy (%).",
        tex_body=r"DINOv2 ViT-B/14. Consistency, stability, distinctiveness, comprehensiveness, purity and "
        r"localisation (\%), local and global explanation size (prototypes), prototype-deletion "
        r"faithfulness (accuracy points), the model-randomisation sanity check (\%) and accuracy (\%).",
        best_within="column",
    ),
    tex_label="tab:explanations",
    dataset="cub",
    filters={"backbone": ANCHOR["backbone"], "variant": "default"},
    label_headers=NO_LABEL,
    label_align=("l",),
    columns=(ColumnGroup(None, {}, (CON, STA, DIS, *BEYOND_THE_PAPER, ACC)),),
    body=_method_sweep(),
    wide=True,
    resize=True,
    tabcolsep="2.4pt",
)

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        _CUB_MAIN,
        _accuracy_sweep("dogs", "dogs", "Stanford Dogs", ALL_BACKBONES, "tab:dogs_main"),
        _accuracy_sweep("dogs_b", "dogs", "Stanford Dogs (B backbones)", B_BACKBONES, "tab:dogs_main_b"),
        _accuracy_sweep("dogs_s", "dogs", "Stanford Dogs (S backbones)", S_BACKBONES, "tab:dogs_main_s"),
        _accuracy_sweep("cars", "cars", "Stanford Cars", ALL_BACKBONES, "tab:cars_main"),
        _SEED_ROBUSTNESS,
        _ABLATION,
        _GATING,
        _OFFLINE_AUG,
        _EXPANDED,
        _RUNTIME,
        _EXPLANATIONS,
    )
}


def get_layout(name: str) -> Layout:
    """The layout registered under ``name``; a ProtobenchError lists the known names."""
    try:
        return LAYOUTS[name]
    except KeyError:
        hint = did_you_mean(name, list(LAYOUTS))
        raise ProtobenchError(
            f"Unknown layout {name!r}{hint}; choose one of {', '.join(LAYOUTS)} (see `protobench report --list`)."
        ) from None


def list_layouts() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered layout, in registry order."""
    return [(layout.name, layout.description) for layout in LAYOUTS.values()]
