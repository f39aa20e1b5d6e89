//! The guard: static rules over a candidate's Python AST, run before anything
//! executes. It answers two questions: is this really a Triton kernel doing the
//! work, and does it try to cheat the evaluator. It is the first layer only; the
//! executor's runtime checks (launch hooks, audited timed calls) back it up.
//!
//! Every rule has an id, a one-paragraph doc and a default severity; a [`GuardRules`]
//! (TOML) may change severities and the PyTorch calls allowed in `forward`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::{Ranged, TextSize};
use serde::{Deserialize, Serialize};

mod rules;

pub use rules::{by_id, Rule, RULES};

/// What a finding does to the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The candidate is `rejected` without running.
    Reject,
    /// Reported, not fatal.
    Warn,
    /// The rule does not run.
    Off,
}

/// One thing the guard found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub severity: Severity,
    /// 1-based.
    pub line: u32,
    /// 1-based, in characters.
    pub column: u32,
    /// A sentence a model can act on.
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("{path}: {message}")]
    Rules { path: String, message: String },
}

/// Which rules reject, which warn, which are off; which PyTorch calls `forward` may make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardRules {
    /// Severity per rule id; rules not named keep their default.
    #[serde(default)]
    pub rules: BTreeMap<String, Severity>,
    /// Fully qualified PyTorch functions `forward` may call (allocation, views, metadata).
    #[serde(default = "default_allowed_torch")]
    pub allow_torch: BTreeSet<String>,
    /// ATen operators (`aten::` names without the prefix, overloads folded) a forward may
    /// dispatch at run time outside the candidate's kernel launches; other namespaces
    /// are written `ns::name`. The runtime half of `allow_torch`: it sees the routes no
    /// static pass can (`getattr` with built strings, `sys.modules`, tensor operators).
    #[serde(default = "default_allowed_aten")]
    pub allow_aten: BTreeSet<String>,
    /// The runtime layers' knobs (`[runtime]`), relaxed per level.
    #[serde(default)]
    pub runtime: RuntimeRules,
}

/// `[runtime]`: what the executor's runtime layers allow beyond `allow_aten`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeRules {
    /// Any ATen operator may run in `forward` (PyTorch and Triton mixed).
    #[serde(default)]
    pub allow_torch_compute: bool,
    /// The least share of a watched forward's GPU window the candidate's own kernels must
    /// fill (GPU timing phase); 0 turns the check off.
    #[serde(default = "default_min_kernel_share")]
    pub min_kernel_share: f64,
    /// Relaxations for the problems of one level (`[runtime.levels.level3]`: problems named
    /// `level3/...`); what a level does not name stays as above.
    #[serde(default)]
    pub levels: BTreeMap<String, LevelRules>,
}

/// `[runtime.levels.<level>]`: the runtime knobs for one level's problems.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelRules {
    #[serde(default)]
    pub allow_torch_compute: Option<bool>,
    #[serde(default)]
    pub min_kernel_share: Option<f64>,
    /// Added to `allow_aten` for this level.
    #[serde(default)]
    pub allow_aten: BTreeSet<String>,
}

impl Default for RuntimeRules {
    fn default() -> Self {
        RuntimeRules {
            allow_torch_compute: false,
            min_kernel_share: default_min_kernel_share(),
            levels: BTreeMap::new(),
        }
    }
}

/// The default least share of a watched forward's GPU window the candidate's own kernels
/// must fill. Low on purpose: a forward that also copies or fills buffers with PyTorch is
/// honest; NumPy on the host, or PyTorch the recorder could not see, leaves the candidate's
/// kernels a sliver of the window.
pub const DEFAULT_MIN_KERNEL_SHARE: f64 = 0.1;

fn default_min_kernel_share() -> f64 {
    DEFAULT_MIN_KERNEL_SHARE
}

/// The runtime knobs that apply to one problem: the top-level ones, with its level's
/// relaxations (`level3/foo` takes `[runtime.levels.level3]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeFor {
    pub allow_aten: BTreeSet<String>,
    pub allow_torch_compute: bool,
    pub min_kernel_share: f64,
}

/// A suite's mixed-kernel policy for one problem (its manifest's, resolved per level), as
/// the guard takes it: the fields it sets override the rules' top-level `[runtime]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SuitePolicy {
    pub allow_torch_compute: Option<bool>,
    pub min_kernel_share: Option<f64>,
}

impl GuardRules {
    /// What the runtime layers allow `problem` (a suite name such as `level1/relu`; its
    /// level is the part before the slash).
    pub fn runtime_for(&self, problem: &str) -> RuntimeFor {
        let level = problem.split_once('/').map(|(l, _)| l);
        self.runtime_for_level(level, None)
    }

    /// What the runtime layers allow a problem of `level` (`level3`) under its suite's
    /// policy: the top-level knobs, then the suite's policy, then this file's
    /// `[runtime.levels.<level>]` (the operator's explicit word has the last say).
    pub fn runtime_for_level(&self, level: Option<&str>, suite: Option<SuitePolicy>) -> RuntimeFor {
        let rt = &self.runtime;
        let mut out = RuntimeFor {
            allow_aten: self.allow_aten.clone(),
            allow_torch_compute: rt.allow_torch_compute,
            min_kernel_share: rt.min_kernel_share,
        };
        if let Some(s) = suite {
            out.allow_torch_compute = s.allow_torch_compute.unwrap_or(out.allow_torch_compute);
            out.min_kernel_share = s.min_kernel_share.unwrap_or(out.min_kernel_share);
        }
        if let Some(l) = level.and_then(|l| rt.levels.get(l)) {
            out.allow_torch_compute = l.allow_torch_compute.unwrap_or(out.allow_torch_compute);
            out.min_kernel_share = l.min_kernel_share.unwrap_or(out.min_kernel_share);
            out.allow_aten.extend(l.allow_aten.iter().cloned());
        }
        out
    }

    /// The rules for a candidate whose problem lets PyTorch compute run in `forward`
    /// (levels 3 and 4): `torch-compute-in-forward` rejects no more, it warns (an explicit
    /// `off` stays off). Every other rule stands: a decoy, the reference model, patching.
    pub fn for_mixed(&self) -> GuardRules {
        let mut rules = self.clone();
        let id = "torch-compute-in-forward".to_string();
        if rules.rules.get(&id).is_none_or(|s| *s == Severity::Reject) {
            rules.rules.insert(id, Severity::Warn);
        }
        rules
    }
}

impl Default for GuardRules {
    fn default() -> Self {
        GuardRules {
            rules: BTreeMap::new(),
            allow_torch: default_allowed_torch(),
            allow_aten: default_allowed_aten(),
            runtime: RuntimeRules::default(),
        }
    }
}

fn default_allowed_torch() -> BTreeSet<String> {
    [
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "arange",
        "tensor",
        "as_strided",
        "broadcast_shapes",
        "promote_types",
        "result_type",
        "is_tensor",
        "is_floating_point",
        "finfo",
        "iinfo",
        "device",
        "Size",
        "no_grad",
        "inference_mode",
        "get_default_dtype",
        "cuda.current_device",
        "cuda.is_available",
        "cuda.device",
        "cuda.get_device_properties",
        "cuda.get_device_capability",
    ]
    .iter()
    .map(|s| format!("torch.{s}"))
    .collect()
}

/// The ATen operators a forward may dispatch outside the candidate's launches by default
/// (allocation, fills, copies, views): the evaluator's allow-list when no guard runs too.
pub fn default_allowed_aten() -> BTreeSet<String> {
    [
        // allocation and filling
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill_",
        "zero_",
        "arange",
        "scalar_tensor",
        "lift_fresh",
        "lift_fresh_copy",
        "resize_",
        // copies and dtype/device moves onto the device
        "clone",
        "copy_",
        "_to_copy",
        "detach",
        "alias",
        // views
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "as_strided",
        "expand",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "narrow",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "diagonal",
        "unfold",
        "view_as_real",
        "view_as_complex",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect()
}

impl GuardRules {
    /// The rules of a TOML file, or the strict default without one; errors name the file.
    pub fn load(path: Option<&std::path::Path>) -> Result<GuardRules, GuardError> {
        let Some(p) = path else {
            return Ok(GuardRules::default());
        };
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p)
            .map_err(|e| GuardError::Rules { path: name.clone(), message: e.to_string() })?;
        GuardRules::from_toml(&text, &name)
    }

    /// Parse a policy file's text; `path` names it in errors.
    pub fn from_toml(text: &str, path: &str) -> Result<GuardRules, GuardError> {
        let policy: GuardRules = toml::from_str(text)
            .map_err(|e| GuardError::Rules { path: path.to_string(), message: e.to_string() })?;
        let shares = std::iter::once(policy.runtime.min_kernel_share)
            .chain(policy.runtime.levels.values().filter_map(|l| l.min_kernel_share));
        for share in shares {
            if !(0.0..=1.0).contains(&share) {
                return Err(GuardError::Rules {
                    path: path.to_string(),
                    message: format!("runtime min_kernel_share {share} is not between 0 and 1"),
                });
            }
        }
        for id in policy.rules.keys() {
            if !RULES.iter().any(|r| r.id == id) {
                return Err(GuardError::Rules {
                    path: path.to_string(),
                    message: format!(
                        "unknown rule `{id}`; the rules are: {}",
                        RULES.iter().map(|r| r.id).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        Ok(policy)
    }

    pub fn severity(&self, rule: &Rule) -> Severity {
        self.rules.get(rule.id).copied().unwrap_or(rule.default)
    }

    /// A stable digest of the policy, for cache keys.
    pub fn fingerprint(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The guard's verdict on one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Set when the file does not parse; the executor then reports the syntax error itself.
    pub parse_error: Option<String>,
}

impl Report {
    pub fn rejects(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Reject)
    }

    /// Linter-style lines for the file shown as `name`: `name:line:col: severity [rule] message`.
    pub fn lines(&self, name: &str) -> String {
        let mut s = String::new();
        if let Some(e) = &self.parse_error {
            s.push_str(&format!("{name}: syntax error: {e}\n"));
        }
        for f in &self.findings {
            s.push_str(&format!(
                "{name}:{}:{}: {} [{}] {}\n",
                f.line,
                f.column,
                f.severity.as_str(),
                f.rule,
                f.message
            ));
        }
        s
    }
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Reject => "reject",
            Severity::Warn => "warn",
            Severity::Off => "off",
        }
    }
}

/// Check one candidate's source.
pub fn check(source: &str, policy: &GuardRules) -> Report {
    let module = match ruff_python_parser::parse_module(source) {
        Ok(parsed) => parsed.into_syntax(),
        Err(e) => {
            let (line, column) = line_col(source, e.location.start());
            return Report {
                findings: vec![],
                parse_error: Some(format!("line {line}, column {column}: {}", e.error)),
            };
        }
    };
    let facts = Facts::collect(&module.body);
    let mut out = Out { source, policy, findings: Vec::new() };
    rules::run(&facts, &module.body, &mut out);
    out.findings.sort_by(|a, b| (a.line, &a.rule, a.column).cmp(&(b.line, &b.rule, b.column)));
    // One finding per rule and line (`os.environ.get` is also `os.environ`).
    out.findings.dedup_by(|b, a| a.line == b.line && a.rule == b.rule);
    out.findings.sort_by_key(|f| (f.line, f.column));
    Report { findings: out.findings, parse_error: None }
}

/// Where findings go; applies the policy's severities.
pub(crate) struct Out<'a> {
    source: &'a str,
    policy: &'a GuardRules,
    findings: Vec<Finding>,
}

impl Out<'_> {
    pub(crate) fn report(&mut self, rule: &Rule, at: TextSize, message: String) {
        let severity = self.policy.severity(rule);
        if severity == Severity::Off {
            return;
        }
        let (line, column) = line_col(self.source, at);
        self.findings.push(Finding { rule: rule.id.to_string(), severity, line, column, message });
    }

    pub(crate) fn allowed_torch(&self, name: &str) -> bool {
        self.policy.allow_torch.contains(name)
    }
}

fn line_col(source: &str, at: TextSize) -> (u32, u32) {
    let at = usize::from(at).min(source.len());
    let before = source.get(..at).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(col).unwrap_or(u32::MAX))
}

/// What the rules need to know about the module, gathered once.
pub(crate) struct Facts<'a> {
    /// Local name → dotted origin (`F` → `torch.nn.functional`, `np` → `numpy`).
    pub aliases: HashMap<String, String>,
    /// Module-level functions by name.
    pub functions: HashMap<String, &'a ast::StmtFunctionDef>,
    /// Names of `@triton.jit` functions.
    pub kernels: BTreeSet<String>,
    pub model_new: Option<&'a ast::StmtClassDef>,
    /// Names assigned at module level (where a cache would live).
    pub globals: BTreeSet<String>,
    /// `self.<attr>` set in `ModelNew.__init__` to a PyTorch module (`nn.Linear(...)`),
    /// with that module's dotted name: calling one in forward is PyTorch compute.
    pub torch_modules: HashMap<String, String>,
    /// Functions reachable from `ModelNew.forward`, `forward` first.
    pub reachable: Vec<&'a ast::StmtFunctionDef>,
}

impl<'a> Facts<'a> {
    fn collect(body: &'a [Stmt]) -> Facts<'a> {
        let mut aliases = HashMap::new();
        collect_imports(body, &mut aliases);
        let mut facts = Facts {
            aliases,
            functions: HashMap::new(),
            kernels: BTreeSet::new(),
            model_new: None,
            globals: BTreeSet::new(),
            torch_modules: HashMap::new(),
            reachable: Vec::new(),
        };
        for stmt in body {
            match stmt {
                Stmt::FunctionDef(f) => {
                    if f.decorator_list.iter().any(|d| facts.is_triton_decorator(&d.expression)) {
                        facts.kernels.insert(f.name.id.to_string());
                    }
                    facts.functions.insert(f.name.id.to_string(), f);
                }
                Stmt::ClassDef(c) if c.name.id.as_str() == "ModelNew" => facts.model_new = Some(c),
                Stmt::Assign(a) => {
                    for t in &a.targets {
                        if let Expr::Name(n) = t {
                            facts.globals.insert(n.id.to_string());
                        }
                    }
                }
                Stmt::AnnAssign(a) => {
                    if let Expr::Name(n) = a.target.as_ref() {
                        facts.globals.insert(n.id.to_string());
                    }
                }
                _ => {}
            }
        }
        // Kernels bound under another name at module level (`k = kernel`, `k = triton.jit(f)`).
        for stmt in body {
            if let Stmt::Assign(a) = stmt {
                let is_kernel = match a.value.as_ref() {
                    Expr::Name(n) => facts.kernels.contains(n.id.as_str()),
                    Expr::Call(c) => facts.is_triton_decorator(&c.func),
                    _ => false,
                };
                if is_kernel {
                    for t in &a.targets {
                        if let Expr::Name(n) = t {
                            facts.kernels.insert(n.id.to_string());
                        }
                    }
                }
            }
        }
        if let Some(init) = facts.method("__init__") {
            let mut found = HashMap::new();
            for stmt in init.body.iter() {
                if let Stmt::Assign(a) = stmt {
                    let Expr::Call(c) = a.value.as_ref() else {
                        continue;
                    };
                    let Some(d) = facts.dotted(&c.func) else {
                        continue;
                    };
                    // Holding parameters is fine; holding a compute module is not.
                    let holder = d.ends_with(".Parameter")
                        || d.ends_with(".ParameterList")
                        || d.ends_with(".ParameterDict")
                        || d.ends_with(".Buffer");
                    if d.starts_with("torch.nn.") && !holder {
                        for t in &a.targets {
                            if let Expr::Attribute(at) = t {
                                if matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                                {
                                    found.insert(at.attr.id.to_string(), d.clone());
                                }
                            }
                        }
                    }
                }
            }
            facts.torch_modules = found;
        }
        facts.reachable = facts.reach();
        facts
    }

    /// `triton.jit`, `triton.autotune(...)`, `triton.heuristics(...)`, `jit` imported from triton.
    fn is_triton_decorator(&self, e: &Expr) -> bool {
        let target = match e {
            Expr::Call(c) => c.func.as_ref(),
            other => other,
        };
        match self.dotted(target) {
            Some(d) => {
                d == "triton.jit"
                    || d == "triton.autotune"
                    || d == "triton.heuristics"
                    || d == "triton.runtime.jit.jit"
            }
            None => false,
        }
    }

    /// The dotted name an expression refers to, with import aliases resolved.
    pub fn dotted(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Name(n) => {
                Some(self.aliases.get(n.id.as_str()).cloned().unwrap_or_else(|| n.id.to_string()))
            }
            Expr::Attribute(a) => Some(format!("{}.{}", self.dotted(&a.value)?, a.attr.id)),
            _ => None,
        }
    }

    /// True when the name is bound to an imported module (or something from one).
    pub fn is_module_path(&self, e: &Expr) -> bool {
        match e {
            Expr::Name(n) => self.aliases.contains_key(n.id.as_str()),
            Expr::Attribute(a) => self.is_module_path(&a.value),
            _ => false,
        }
    }

    fn method(&self, name: &str) -> Option<&'a ast::StmtFunctionDef> {
        self.model_new.and_then(|c| {
            c.body.iter().find_map(|s| match s {
                Stmt::FunctionDef(f) if f.name.id.as_str() == name => Some(f),
                _ => None,
            })
        })
    }

    /// `forward`, then every method (`self.m(...)`) and module-level or nested function
    /// (`f(...)`) it can call, transitively.
    fn reach(&self) -> Vec<&'a ast::StmtFunctionDef> {
        let Some(forward) = self.method("forward") else {
            return vec![];
        };
        let mut seen: Vec<&'a ast::StmtFunctionDef> = vec![forward];
        let mut i = 0;
        while i < seen.len() {
            let f = seen[i];
            let mut calls = CallNames::default();
            calls.visit_body(&f.body);
            for (is_self, name) in calls.names {
                let next = if is_self {
                    self.method(&name)
                } else {
                    self.functions
                        .get(&name)
                        .copied()
                        .filter(|g| !self.kernels.contains(g.name.id.as_str()))
                };
                if let Some(g) = next {
                    if !seen.iter().any(|s| std::ptr::eq(*s, g)) {
                        seen.push(g);
                    }
                }
            }
            i += 1;
        }
        seen
    }
}

fn collect_imports(body: &[Stmt], aliases: &mut HashMap<String, String>) {
    for stmt in body {
        match stmt {
            Stmt::Import(i) => {
                for a in &i.names {
                    let full = a.name.id.to_string();
                    match &a.asname {
                        Some(as_) => {
                            aliases.insert(as_.id.to_string(), full);
                        }
                        None => {
                            let top = full.split('.').next().unwrap_or(&full).to_string();
                            aliases.insert(top.clone(), top);
                        }
                    }
                }
            }
            Stmt::ImportFrom(i) => {
                let module = i.module.as_ref().map(|m| m.id.to_string()).unwrap_or_default();
                for a in &i.names {
                    let local = a.asname.as_ref().unwrap_or(&a.name).id.to_string();
                    aliases.insert(local, format!("{module}.{}", a.name.id));
                }
            }
            // Imports inside try/if blocks (import guards) count too.
            Stmt::Try(t) => {
                collect_imports(&t.body, aliases);
                for h in &t.handlers {
                    let ast::ExceptHandler::ExceptHandler(h) = h;
                    collect_imports(&h.body, aliases);
                }
            }
            Stmt::If(i) => {
                collect_imports(&i.body, aliases);
                for c in &i.elif_else_clauses {
                    collect_imports(&c.body, aliases);
                }
            }
            _ => {}
        }
    }
}

/// Names called directly (`f(...)`) or as methods of `self` (`self.f(...)`).
#[derive(Default)]
struct CallNames {
    names: Vec<(bool, String)>,
}

impl<'a> Visitor<'a> for CallNames {
    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Call(c) = expr {
            match c.func.as_ref() {
                Expr::Name(n) => self.names.push((false, n.id.to_string())),
                Expr::Attribute(a) => {
                    if let Expr::Name(v) = a.value.as_ref() {
                        if v.id.as_str() == "self" {
                            self.names.push((true, a.attr.id.to_string()));
                        }
                    }
                }
                _ => {}
            }
        }
        visitor::walk_expr(self, expr);
    }
}

/// Start offset of any node.
pub(crate) fn start<T: Ranged>(node: &T) -> TextSize {
    node.range().start()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HONEST: &str = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, y, n, B: tl.constexpr):\n    pass\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n        k[(1,)](x, y, x.numel(), B=16)\n        return y\n";

    #[test]
    fn an_honest_launch_has_no_findings() {
        let r = check(HONEST, &GuardRules::default());
        assert_eq!(r.findings, vec![]);
        assert!(!r.rejects());
    }

    #[test]
    fn findings_carry_rule_line_and_column() {
        let src = HONEST.replace("return y", "return torch.relu(y)");
        let r = check(&src, &GuardRules::default());
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        let f = &r.findings[0];
        assert_eq!((f.rule.as_str(), f.line, f.column), ("torch-compute-in-forward", 14, 16));
        assert!(r.rejects());
    }

    #[test]
    fn a_policy_changes_severities_and_unknown_rules_are_named() {
        let src = HONEST.replace("return y", "return torch.relu(y)");
        let p =
            GuardRules::from_toml("[rules]\n\"torch-compute-in-forward\" = \"warn\"\n", "p.toml")
                .unwrap();
        let r = check(&src, &p);
        assert_eq!(r.findings[0].severity, Severity::Warn);
        assert!(!r.rejects());
        let p = GuardRules::from_toml(
            "allow_torch = [\"torch.empty_like\", \"torch.relu\"]\n",
            "p.toml",
        )
        .unwrap();
        assert!(check(&src, &p).findings.is_empty());
        let err = GuardRules::from_toml("[rules]\nbogus = \"off\"\n", "p.toml").unwrap_err();
        assert!(err.to_string().contains("p.toml") && err.to_string().contains("bogus"));
    }

    #[test]
    fn runtime_knobs_default_strict_and_relax_per_level() {
        let strict = GuardRules::default().runtime_for("level1/relu");
        assert!(!strict.allow_torch_compute);
        assert_eq!(strict.min_kernel_share, DEFAULT_MIN_KERNEL_SHARE);
        assert!(strict.allow_aten.contains("empty_like") && !strict.allow_aten.contains("relu"));
        let text = "[runtime]\nmin_kernel_share = 0.2\n\n[runtime.levels.level3]\n\
                    allow_torch_compute = true\nmin_kernel_share = 0.0\nallow_aten = [\"add\"]\n";
        let p = GuardRules::from_toml(text, "p.toml").unwrap();
        let l1 = p.runtime_for("level1/relu");
        assert_eq!((l1.allow_torch_compute, l1.min_kernel_share), (false, 0.2));
        let l3 = p.runtime_for("level3/mlp");
        assert_eq!((l3.allow_torch_compute, l3.min_kernel_share), (true, 0.0));
        assert!(l3.allow_aten.contains("add") && !l1.allow_aten.contains("add"));
        assert_ne!(p.fingerprint(), GuardRules::default().fingerprint());
        // A suite's policy overrides the top level; the file's level section overrides both.
        let suite = SuitePolicy { allow_torch_compute: Some(true), min_kernel_share: Some(0.5) };
        let l3s = p.runtime_for_level(Some("level3"), Some(suite));
        assert_eq!((l3s.allow_torch_compute, l3s.min_kernel_share), (true, 0.0));
        let l4s = p.runtime_for_level(Some("level4"), Some(suite));
        assert_eq!((l4s.allow_torch_compute, l4s.min_kernel_share), (true, 0.5));
        let bad = GuardRules::from_toml("[runtime]\nmin_kernel_share = 1.5\n", "bad.toml");
        assert!(bad.is_err_and(|e| e.to_string().contains("bad.toml")));
    }

    #[test]
    fn mixed_levels_warn_on_pytorch_compute_and_keep_every_other_rule() {
        let src = "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n\
                   class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        \
                   k[(1,)](x)\n        return torch.relu(x) @ x\n";
        let strict = GuardRules::default();
        assert!(check(src, &strict).rejects());
        let mixed = strict.for_mixed();
        let r = check(src, &mixed);
        assert!(!r.rejects(), "{:?}", r.findings);
        assert!(r.findings.iter().any(|f| f.rule == "torch-compute-in-forward"));
        // A decoy (no launch reachable from forward) is still rejected at a mixed level.
        let decoy = "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n\
                     class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        \
                     return torch.relu(x)\n";
        assert!(check(decoy, &mixed).rejects());
        // An explicit `off` stays off.
        let off =
            GuardRules::from_toml("[rules]\n\"torch-compute-in-forward\" = \"off\"\n", "p.toml")
                .unwrap()
                .for_mixed();
        assert!(check(src, &off).findings.iter().all(|f| f.rule != "torch-compute-in-forward"));
    }

    #[test]
    fn a_syntax_error_is_reported_not_judged() {
        let r = check("class ModelNew(:\n", &GuardRules::default());
        assert!(r.parse_error.is_some_and(|e| e.starts_with("line 1")));
        assert!(r.findings.is_empty());
    }

    #[test]
    fn every_rule_has_a_unique_id_and_a_doc() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
        assert!(RULES.iter().all(|r| r.doc.len() > 80));
    }
}
