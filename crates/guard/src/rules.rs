//! The rules. Each has an id, a default severity and a doc saying what it catches,
//! why it matters and an example; `run` applies them all in two passes: one over the
//! whole module, one over the code reachable from `ModelNew.forward`.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Operator, Stmt};
use ruff_text_size::TextSize;

use crate::{start, Facts, Out, Severity};

pub struct Rule {
    pub id: &'static str,
    pub default: Severity,
    pub doc: &'static str,
}

macro_rules! rules {
    ($($name:ident = $id:literal, $sev:ident, $doc:literal;)*) => {
        $(pub(crate) static $name: Rule = Rule { id: $id, default: Severity::$sev, doc: $doc };)*
        /// Every rule, in the order `tritonforge guard --rules` lists them.
        pub static RULES: &[&Rule] = &[$(&$name),*];
    };
}

rules! {
    NO_MODELNEW = "no-modelnew", Reject,
        "The file defines no class `ModelNew`. The evaluator builds `ModelNew` with the problem's \
         init inputs and calls its `forward`; without it there is nothing to evaluate. Example: \
         a file that only defines `class Model`.";
    NO_KERNEL = "no-triton-kernel", Reject,
        "No function is decorated with `@triton.jit` (or `triton.autotune`/`triton.heuristics` over \
         one). A candidate must do its work in Triton kernels of its own; a file without one is \
         PyTorch (or something else) in disguise.";
    NOT_LAUNCHED = "kernel-not-launched", Reject,
        "No Triton kernel is launched (`kernel[grid](...)`) from code reachable from \
         `ModelNew.forward`: its own methods and the module's functions it calls. A kernel \
         defined but never run is a decoy. Example: a `@triton.jit` kernel next to \
         `def forward(self, x): return torch.relu(x)`.";
    REFERENCE_MODEL = "uses-reference-model", Reject,
        "`ModelNew` subclasses the reference `Model`, or code reachable from `forward` builds one. \
         Its answers would then come from the reference itself. Example: `class ModelNew(Model)` \
         with `super().forward(x)`.";
    TORCH_COMPUTE = "torch-compute-in-forward", Reject,
        "Code reachable from `forward` calls a PyTorch compute operation (matmul, convolution, \
         activations, reductions, `torch.nn.functional`, tensor methods such as `.sum()`, the \
         `@` operator) instead of allocating, reshaping and launching kernels. Which `torch.*` \
         calls are allowed is policy (`allow_torch`); the default allows allocation, views and \
         metadata. Example: `y = x @ w; kernel[grid](y, ...)`.";
    TRY_EXCEPT = "try-except-in-forward", Reject,
        "A `try` statement in code reachable from `forward`. Its classic use is falling back to \
         the reference when the kernel fails, which turns a broken kernel into a correct \
         verdict. An import guard at module level is fine.";
    DYNAMIC_CODE = "dynamic-code", Reject,
        "`exec`, `eval`, `compile`, `__import__`, `importlib`, `globals()`, or `getattr`/`setattr` \
         with a name that is not a string literal. Code built at run time escapes every static \
         rule. Example: `getattr(torch, 'mat' + 'mul')(a, b)`.";
    PROCESS = "process-or-system", Reject,
        "`subprocess`, `os.system` and friends, sockets, `ctypes`, threads, processes, signals. A \
         kernel needs none of them; they can reach outside the sandbox, run work the timer \
         misses, or crash the evaluator. Example: `threading.Thread(target=finish_later).start()`.";
    MONKEY_PATCH = "monkey-patching", Reject,
        "Assigning an attribute of an imported module (`torch`, `time`, `triton`, ...), or \
         `setattr` on one. Patching the timer, the comparison or Triton's hooks changes the \
         evaluator's behaviour, not the kernel's. Example: `time.perf_counter = lambda: 0.0`.";
    SUBCLASS = "tensor-subclass", Reject,
        "A `torch.Tensor` subclass, `__torch_function__`/`__torch_dispatch__`, `_make_subclass`, \
         `as_subclass` or a dispatch mode. A tensor subclass can compute lazily or lie about its \
         values when compared.";
    STREAMS = "streams-events-graphs", Reject,
        "CUDA streams, events or graphs (`torch.cuda.Stream`, `torch.cuda.stream`, `Event`, \
         `CUDAGraph`, `graph`). Work on another stream can finish after the timer stops; \
         graphs replay stale work. GuardRules may allow them for kernels that need them.";
    STATE = "cross-call-state", Reject,
        "State carried from one `forward` call to the next: `lru_cache`/`cache`, `global`, \
         assigning `self.<attr>` or into a container in code reachable from `forward`, or keys \
         built from `id()` or `.data_ptr()`. A cached output is right once and stale after. \
         Example: `self.cache[x.data_ptr()] = y`.";
    FILES = "file-or-env-access", Reject,
        "Opening files, reading or setting environment variables, `pathlib`, `shutil`, \
         `torch.load`/`save`, `numpy.load`/`save`. A kernel needs no files; reading one can \
         fetch a stored answer, writing one can poison a later evaluation.";
    INTROSPECTION = "introspection", Reject,
        "`inspect`, `gc`, `sys._getframe`, `sys.modules`, frame or function internals \
         (`__globals__`, `__code__`, `f_back`, ...). They reach into the evaluator's own objects: \
         the reference's outputs, the timer, the protocol channel.";
    HOST_ROUND_TRIP = "host-round-trip", Reject,
        "Code reachable from `forward` moves tensor data to the host (`.cpu()`, `.numpy()`, \
         `.tolist()`, `.item()`) or computes with `numpy`. The work then happens outside any \
         kernel. Example: `torch.from_numpy(np.maximum(x.cpu().numpy(), 0))`.";
    DOWNCAST = "precision-downcast", Warn,
        "Half or bfloat16 precision (`.half()`, `.to(torch.float16)`, `tl.float16`, ...) in a \
         candidate. Legitimate for half-precision problems; elsewhere it trades accuracy for \
         speed and may pass loose tolerances by luck.";
}

/// The compute methods of `torch.Tensor` that `forward` must not call.
const COMPUTE_METHODS: &[&str] = &[
    "abs",
    "add",
    "add_",
    "addmm",
    "all",
    "amax",
    "amin",
    "any",
    "argmax",
    "argmin",
    "argsort",
    "baddbmm",
    "bmm",
    "ceil",
    "clamp",
    "clamp_",
    "clip",
    "conv1d",
    "conv2d",
    "conv3d",
    "cos",
    "cummax",
    "cumprod",
    "cumsum",
    "div",
    "div_",
    "dot",
    "einsum",
    "erf",
    "exp",
    "exp_",
    "floor",
    "gelu",
    "log",
    "log1p",
    "log_",
    "log_softmax",
    "logsumexp",
    "masked_fill",
    "masked_fill_",
    "matmul",
    "max",
    "maximum",
    "mean",
    "median",
    "min",
    "minimum",
    "mm",
    "mul",
    "mul_",
    "mv",
    "neg",
    "norm",
    "pow",
    "prod",
    "reciprocal",
    "relu",
    "relu_",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "softmax",
    "sort",
    "sqrt",
    "std",
    "sub",
    "sub_",
    "sum",
    "tanh",
    "topk",
    "var",
    "where",
];

const FORBIDDEN_MODULES: &[&str] = &[
    "subprocess",
    "socket",
    "ctypes",
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "signal",
    "asyncio",
    "cffi",
    "mmap",
    "selectors",
    "http",
    "urllib",
    "requests",
];

pub(crate) fn run(facts: &Facts, body: &[Stmt], out: &mut Out) {
    let zero = TextSize::from(0);
    let Some(model_new) = facts.model_new else {
        out.report(&NO_MODELNEW, zero, "the file defines no class `ModelNew`; define `class ModelNew(nn.Module)` with the same constructor and forward signature as `Model`".into());
        if facts.kernels.is_empty() {
            out.report(&NO_KERNEL, zero, "no `@triton.jit` kernel is defined; the work must be done by Triton kernels of your own".into());
        }
        Whole { facts, out }.visit_body(body);
        return;
    };
    if facts.kernels.is_empty() {
        out.report(&NO_KERNEL, start(model_new), "no `@triton.jit` kernel is defined; the work must be done by Triton kernels of your own".into());
    }
    for base in model_new.bases() {
        if facts.dotted(base).is_some_and(|d| d == "Model" || d.ends_with(".Model")) {
            out.report(&REFERENCE_MODEL, start(base), "`ModelNew` subclasses the reference `Model`; subclass `nn.Module` and compute the result with your own kernels".into());
        }
    }
    if facts.reachable.is_empty() {
        out.report(&NOT_LAUNCHED, start(model_new), "`ModelNew` has no `forward` method".into());
    } else if !facts.kernels.is_empty() {
        let mut launches = Launches { facts, found: false };
        for f in &facts.reachable {
            launches.visit_body(&f.body);
        }
        if !launches.found {
            let names: Vec<&str> = facts.kernels.iter().map(String::as_str).collect();
            out.report(&NOT_LAUNCHED, start(facts.reachable[0]), format!(
                "no Triton kernel is launched from `forward` or the functions it calls (defined: {}); launch it as `kernel[grid](...)` on every call",
                names.join(", ")));
        }
    }
    Whole { facts, out: &mut *out }.visit_body(body);
    let mut fwd = Forward { facts, out };
    for f in &facts.reachable {
        fwd.visit_body(&f.body);
    }
}

/// Finds `kernel[grid](...)` (and `kernel.run(...)`) for any known kernel.
struct Launches<'f, 'a> {
    facts: &'f Facts<'a>,
    found: bool,
}

impl<'a> Visitor<'a> for Launches<'_, '_> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Call(c) = expr {
            let launched = match c.func.as_ref() {
                Expr::Subscript(s) => self.is_kernel(&s.value),
                Expr::Attribute(a) => a.attr.id.as_str() == "run" && self.is_kernel(&a.value),
                _ => false,
            };
            self.found |= launched;
        }
        visitor::walk_expr(self, expr);
    }
}

impl Launches<'_, '_> {
    fn is_kernel(&self, e: &Expr) -> bool {
        match e {
            Expr::Name(n) => self.facts.kernels.contains(n.id.as_str()),
            _ => false,
        }
    }
}

/// Rules that apply to every line of the file.
struct Whole<'f, 'a, 'o> {
    facts: &'f Facts<'a>,
    out: &'f mut Out<'o>,
}

impl<'a> Visitor<'a> for Whole<'_, '_, '_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(i) => {
                for a in &i.names {
                    self.module_used(a.name.id.as_str(), start(a));
                }
            }
            Stmt::ImportFrom(i) => {
                if let Some(m) = &i.module {
                    self.module_used(m.id.as_str(), start(i));
                    for a in &i.names {
                        self.dotted_used(&format!("{}.{}", m.id, a.name.id), start(a));
                    }
                }
            }
            Stmt::Assign(a) => {
                for t in &a.targets {
                    self.assigned(t);
                }
            }
            Stmt::AugAssign(a) => self.assigned(&a.target),
            Stmt::AnnAssign(a) => self.assigned(&a.target),
            Stmt::ClassDef(c) => {
                for base in c.bases() {
                    if self.facts.dotted(base).is_some_and(|d| d == "torch.Tensor") {
                        self.out.report(
                            &SUBCLASS,
                            start(base),
                            format!(
                                "class `{}` subclasses `torch.Tensor`; return plain tensors",
                                c.name.id
                            ),
                        );
                    }
                }
            }
            Stmt::FunctionDef(f) => {
                let name = f.name.id.as_str();
                if name == "__torch_function__" || name == "__torch_dispatch__" {
                    self.out.report(
                        &SUBCLASS,
                        start(f),
                        format!("`{name}` overrides PyTorch's dispatch; return plain tensors"),
                    );
                }
                for d in &f.decorator_list {
                    let target = match &d.expression {
                        Expr::Call(c) => c.func.as_ref(),
                        e => e,
                    };
                    if let Some(dn) = self.facts.dotted(target) {
                        if dn == "functools.lru_cache"
                            || dn == "functools.cache"
                            || dn == "lru_cache"
                            || dn == "cache"
                        {
                            self.out.report(&STATE, start(d), format!("`@{dn}` on `{name}` caches results across calls; compute on every call"));
                        }
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Call(c) => self.call(c),
            Expr::Attribute(a) => {
                let attr = a.attr.id.as_str();
                if matches!(
                    attr,
                    "__globals__"
                        | "__code__"
                        | "__closure__"
                        | "__subclasses__"
                        | "__builtins__"
                        | "f_back"
                        | "f_locals"
                        | "f_globals"
                        | "gi_frame"
                ) {
                    self.out.report(
                        &INTROSPECTION,
                        start(a),
                        format!(
                            "`.{attr}` reaches into interpreter internals; a kernel needs none"
                        ),
                    );
                }
                if let Some(d) = self.facts.dotted(expr) {
                    if self.facts.is_module_path(expr) {
                        self.dotted_used(&d, start(a));
                    }
                }
            }
            Expr::Name(n) if n.id.as_str() == "__builtins__" => {
                self.out.report(
                    &DYNAMIC_CODE,
                    start(n),
                    "`__builtins__` gives access to `eval`, `exec` and `__import__`".into(),
                );
            }
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}

impl Whole<'_, '_, '_> {
    fn module_used(&mut self, module: &str, at: TextSize) {
        let top = module.split('.').next().unwrap_or(module);
        if FORBIDDEN_MODULES.contains(&top) {
            self.out.report(&PROCESS, at, format!("`{module}` is not for kernels (processes, threads, sockets, native calls); remove it"));
        }
        if top == "importlib" {
            self.out.report(
                &DYNAMIC_CODE,
                at,
                "`importlib` loads code at run time; import what you need at the top of the file"
                    .into(),
            );
        }
        if matches!(top, "inspect" | "gc") {
            self.out.report(
                &INTROSPECTION,
                at,
                format!("`{module}` reaches into the evaluator's objects; a kernel needs none"),
            );
        }
        if matches!(top, "pathlib" | "shutil" | "tempfile" | "pickle") {
            self.out.report(&FILES, at, format!("`{module}` touches files; a kernel needs none"));
        }
    }

    /// A dotted reference to something in a module (`os.system`, `torch.cuda.Stream`).
    fn dotted_used(&mut self, d: &str, at: TextSize) {
        let os_process = [
            "os.system",
            "os.popen",
            "os.fork",
            "os.kill",
            "os.killpg",
            "os._exit",
            "os.spawnl",
            "os.spawnv",
            "os.execv",
            "os.execl",
            "os.execve",
            "os.posix_spawn",
        ];
        if os_process.contains(&d) {
            self.out.report(&PROCESS, at, format!("`{d}` starts or signals processes; remove it"));
        }
        let files = [
            "os.environ",
            "os.getenv",
            "os.putenv",
            "os.remove",
            "os.unlink",
            "os.rename",
            "os.mkdir",
            "os.makedirs",
            "os.listdir",
            "os.open",
            "os.chdir",
            "io.open",
            "torch.load",
            "torch.save",
            "numpy.load",
            "numpy.save",
            "numpy.fromfile",
            "sys.argv",
        ];
        // `d` is one of them or a member of one (no allocation per attribute visited).
        let under = |f: &str| {
            d.strip_prefix(f).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        };
        if files.iter().any(|f| under(f)) {
            self.out.report(
                &FILES,
                at,
                format!("`{d}` reads or writes files or the environment; a kernel needs neither"),
            );
        }
        if matches!(
            d,
            "sys._getframe" | "sys.modules" | "sys.settrace" | "sys.setprofile" | "sys.meta_path"
        ) {
            self.out.report(
                &INTROSPECTION,
                at,
                format!("`{d}` reaches into the interpreter; a kernel needs none"),
            );
        }
        let streams = [
            "torch.cuda.Stream",
            "torch.cuda.stream",
            "torch.cuda.Event",
            "torch.cuda.CUDAGraph",
            "torch.cuda.graph",
            "torch.cuda.make_graphed_callables",
            "torch.cuda.ExternalStream",
            "torch.cuda.set_stream",
            "torch.Stream",
            "torch.Event",
        ];
        if streams.contains(&d) {
            self.out.report(&STREAMS, at, format!("`{d}`: run on the caller's stream without events or graphs, so the timer sees all the work"));
        }
        if d.starts_with("torch.utils._python_dispatch")
            || d.ends_with("TorchDispatchMode")
            || d.ends_with("TorchFunctionMode")
            || d.ends_with("._make_subclass")
        {
            self.out.report(
                &SUBCLASS,
                at,
                format!("`{d}` intercepts PyTorch's dispatch; return plain tensors"),
            );
        }
        if matches!(
            d,
            "torch.float16"
                | "torch.half"
                | "torch.bfloat16"
                | "triton.language.float16"
                | "triton.language.bfloat16"
        ) {
            self.out.report(
                &DOWNCAST,
                at,
                format!("`{d}`: half precision; make sure the problem's dtype calls for it"),
            );
        }
    }

    fn assigned(&mut self, target: &Expr) {
        let root = match target {
            Expr::Attribute(a) => Some(a.value.as_ref()),
            Expr::Subscript(s) => match s.value.as_ref() {
                Expr::Attribute(a) => Some(a.value.as_ref()),
                _ => None,
            },
            _ => None,
        };
        if let Some(root) = root {
            if self.facts.is_module_path(root) {
                let what = self.facts.dotted(target).unwrap_or_else(|| "a module attribute".into());
                self.out.report(&MONKEY_PATCH, start(target), format!("assigning `{what}` patches a library the evaluator also uses; leave modules as they are"));
            }
        }
    }

    fn call(&mut self, c: &ast::ExprCall) {
        let at = start(c);
        match c.func.as_ref() {
            Expr::Name(n) => {
                let name = n.id.as_str();
                if matches!(
                    name,
                    "exec"
                        | "eval"
                        | "compile"
                        | "__import__"
                        | "globals"
                        | "locals"
                        | "breakpoint"
                ) && !self.facts.aliases.contains_key(name)
                {
                    self.out.report(&DYNAMIC_CODE, at, format!("`{name}(...)` runs or exposes code built at run time; write the code out"));
                }
                if matches!(name, "getattr" | "setattr" | "delattr" | "hasattr") {
                    let literal = matches!(c.arguments.args.get(1), Some(Expr::StringLiteral(_)));
                    if !literal {
                        self.out.report(&DYNAMIC_CODE, at, format!("`{name}` with a computed attribute name hides what is called; use the attribute directly"));
                    }
                    if name == "setattr" {
                        if let Some(obj) = c.arguments.args.first() {
                            if self.facts.is_module_path(obj) {
                                self.out.report(&MONKEY_PATCH, at, "`setattr` on a module patches a library the evaluator also uses".into());
                            }
                        }
                    }
                }
                if name == "open" && !self.facts.aliases.contains_key(name) {
                    self.out.report(
                        &FILES,
                        at,
                        "`open(...)`: a kernel reads and writes no files".into(),
                    );
                }
            }
            Expr::Attribute(a) => {
                let m = a.attr.id.as_str();
                if m == "as_subclass" || m == "_make_subclass" {
                    self.out.report(
                        &SUBCLASS,
                        at,
                        format!("`.{m}(...)` makes a tensor subclass; return plain tensors"),
                    );
                }
                if matches!(m, "half" | "bfloat16") && c.arguments.args.is_empty() {
                    self.out.report(
                        &DOWNCAST,
                        at,
                        format!(
                            "`.{m}()`: half precision; make sure the problem's dtype calls for it"
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

/// Rules for code reachable from `forward`.
struct Forward<'f, 'a, 'o> {
    facts: &'f Facts<'a>,
    out: &'f mut Out<'o>,
}

impl<'a> Visitor<'a> for Forward<'_, '_, '_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Try(t) => self.out.report(&TRY_EXCEPT, start(t), "`try` in forward: a failing kernel must fail the evaluation, not fall back to another computation".into()),
            Stmt::Global(g) => self.out.report(&STATE, start(g), "`global` in forward carries state across calls; compute everything on every call".into()),
            Stmt::Assign(a) => {
                for t in &a.targets {
                    self.stateful_target(t);
                }
            }
            Stmt::AugAssign(a) => self.stateful_target(&a.target),
            // Nested functions are reached when called; classes inside forward are unusual but walked.
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::BinOp(b) if b.op == Operator::MatMult => {
                self.out.report(
                    &TORCH_COMPUTE,
                    start(b),
                    "`@` is a PyTorch matrix multiply; do it in a Triton kernel".into(),
                );
            }
            Expr::Call(c) => self.call(c),
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}

impl Forward<'_, '_, '_> {
    fn stateful_target(&mut self, t: &Expr) {
        match t {
            Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") =>
            {
                self.out.report(&STATE, start(t), format!("forward assigns `self.{}`, which carries state to the next call; keep per-call values in locals", a.attr.id));
            }
            Expr::Subscript(s) => {
                let container = match s.value.as_ref() {
                    Expr::Attribute(a) => {
                        matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                    }
                    Expr::Name(n) => self.facts.globals.contains(n.id.as_str()),
                    _ => false,
                };
                if container {
                    self.out.report(&STATE, start(t), "forward stores into a container that outlives the call (a cache); compute on every call".into());
                }
            }
            _ => {}
        }
    }

    fn call(&mut self, c: &ast::ExprCall) {
        let at = start(c);
        if self.facts.dotted(&c.func).is_some_and(|d| d == "Model" || d.ends_with(".Model")) {
            self.out.report(
                &REFERENCE_MODEL,
                at,
                "forward builds the reference `Model`; compute the result with your own kernels"
                    .into(),
            );
        }
        if let Expr::Attribute(a) = c.func.as_ref() {
            if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") {
                if let Some(module) = self.facts.torch_modules.get(a.attr.id.as_str()) {
                    self.out.report(&TORCH_COMPUTE, at, format!("`self.{}` is a `{module}`: calling it in forward is PyTorch compute; use its parameters in a Triton kernel", a.attr.id));
                }
            }
        }
        if let Expr::Name(n) = c.func.as_ref() {
            if n.id.as_str() == "id" {
                self.out.report(
                    &STATE,
                    at,
                    "`id(...)` in forward is a cache key in disguise; compute on every call".into(),
                );
            }
        }
        let is_module = self.facts.is_module_path(&c.func);
        if !is_module {
            // A method of some value (a tensor, presumably): `x.sum()`, `y.cpu()`.
            if let Expr::Attribute(a) = c.func.as_ref() {
                let m = a.attr.id.as_str();
                let on_self_module =
                    matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self");
                if COMPUTE_METHODS.contains(&m)
                    && !is_python_builtin_owner(&a.value)
                    && !on_self_module
                {
                    self.out.report(&TORCH_COMPUTE, at, format!("`.{m}(...)` in forward is a PyTorch compute call; do it in a Triton kernel"));
                }
                if matches!(m, "cpu" | "numpy" | "tolist" | "item") {
                    self.out.report(&HOST_ROUND_TRIP, at, format!("`.{m}()` moves tensor data to the host; keep the work on the device in a kernel"));
                }
                if m == "data_ptr" {
                    self.out.report(&STATE, at, "`.data_ptr()` in forward is a cache key in disguise (kernels take tensors directly)".into());
                }
            }
            return;
        }
        let Some(d) = self.facts.dotted(&c.func) else {
            return;
        };
        // `torch.cuda.*` utilities are not compute (streams have their own rule).
        if d.starts_with("torch.") && !d.starts_with("torch.cuda.") && !self.out.allowed_torch(&d) {
            self.out.report(&TORCH_COMPUTE, at, format!("`{d}` in forward: PyTorch compute (or a call the policy does not allow); do the work in a Triton kernel"));
        } else if d.starts_with("numpy.") || d == "numpy" {
            self.out.report(
                &HOST_ROUND_TRIP,
                at,
                format!("`{d}` computes on the host; do the work in a Triton kernel"),
            );
        }
    }
}

/// `max(...)` on a Python container or string formatting is not PyTorch.
fn is_python_builtin_owner(e: &Expr) -> bool {
    matches!(
        e,
        Expr::StringLiteral(_)
            | Expr::List(_)
            | Expr::Tuple(_)
            | Expr::Dict(_)
            | Expr::NumberLiteral(_)
    )
}

/// `rules::by_id` for the CLI.
pub fn by_id(id: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.id == id)
}
