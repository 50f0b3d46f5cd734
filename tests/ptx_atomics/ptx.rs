//! Reading the PTX: the two builds' modules, split into instructions with the function each
//! belongs to, and the questions the checks ask of them.

use std::collections::BTreeSet;
use std::path::Path;

/// One PTX instruction.
pub(crate) struct Inst {
    /// The function it belongs to (mangled name).
    pub(crate) func: String,
    /// The opcode with its qualifiers, e.g. `atom.acq_rel.sys.exch.b32`.
    pub(crate) op: String,
    /// The operands, e.g. `["%r1", "[%rd2]", "%r3"]`.
    pub(crate) args: Vec<String>,
    /// How many branch targets (`$L__BB...:` labels) come before it in the module: two
    /// instructions with the same count follow each other in every run that reaches the
    /// second (no jump lands between them).
    pub(crate) block: usize,
}

impl Inst {
    /// The dot-separated parts of the opcode: `atom`, `acq_rel`, `sys`, `exch`, `b32`.
    pub(crate) fn parts(&self) -> Vec<&str> {
        self.op.split('.').collect()
    }
    pub(crate) fn has(&self, part: &str) -> bool {
        self.parts().contains(&part)
    }
    /// `atom.*` or `red.*`: a read-modify-write in memory.
    pub(crate) fn is_rmw(&self) -> bool {
        self.op.starts_with("atom.") || self.op.starts_with("red.")
    }
    /// The memory order it names (`relaxed`, `acquire`, `release`, `acq_rel`, `sc`), if any.
    pub(crate) fn order(&self) -> Option<&str> {
        self.parts()
            .into_iter()
            .find(|p| ["relaxed", "acquire", "release", "acq_rel", "sc"].contains(p))
    }
}

pub(crate) fn ptx() -> String {
    read_ptx("TEST_PTX_PATH", gpuio_kernels_gpu::TEST_PTX_PATH)
}

/// The lockstep build: `sm_60`.
pub(crate) fn ptx_sm60() -> String {
    read_ptx("TEST_PTX_SM60_PATH", gpuio_kernels_gpu::TEST_PTX_SM60_PATH)
}

pub(crate) fn read_ptx(var: &str, path: &str) -> String {
    const SKIPPED: &str = "this build skipped the GPU kernels (GPUIO_SKIP_GPU_BUILD=1); rebuild without it";
    assert!(!path.is_empty(), "{var} is empty: {SKIPPED}");
    let text = std::fs::read_to_string(Path::new(path)).unwrap_or_else(|e| panic!("reading {var}={path}: {e}"));
    assert!(!text.trim().is_empty(), "{path} is empty: {SKIPPED}");
    text
}

/// The instructions of the module, each with its function.
pub(crate) fn instructions(ptx: &str) -> Vec<Inst> {
    let mut func = String::from("<module>");
    let mut block = 0;
    let mut out = Vec::new();
    for line in ptx.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        if let Some(name) = function_name(line) {
            func = name;
            block += 1;
            continue;
        }
        // A basic block's label (LLVM names them `$L__BB<function>_<n>`); not the labels
        // that debug info places at inlining boundaries (`$L__tmp<n>`), which no jump targets.
        if line.starts_with("$L__BB") && line.ends_with(':') {
            block += 1;
            continue;
        }
        // Directives, declarations, braces and labels are not instructions.
        if line.is_empty() || line.starts_with(['.', '{', '}', '$', ')']) || line.ends_with(':') {
            continue;
        }
        let line = line.trim_end_matches(';').trim();
        // A guard predicate (`@%p1` / `@!%p1`) comes first.
        let line = match line.strip_prefix('@') {
            Some(rest) => rest.split_once(char::is_whitespace).map_or("", |(_, i)| i.trim()),
            None => line,
        };
        let (op, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let args = rest
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        out.push(Inst {
            func: func.clone(),
            op: op.to_string(),
            args,
            block,
        });
    }
    assert!(
        out.iter().any(|i| i.op == "ret"),
        "the PTX parser found no instructions"
    );
    out
}

/// The name of the function a `.func` / `.entry` header line opens.
pub(crate) fn function_name(line: &str) -> Option<String> {
    let rest = [".func", ".entry"].iter().find_map(|kw| {
        line.split_once(&format!("{kw} "))
            .filter(|(before, _)| before.split_whitespace().all(|w| w.starts_with('.')))
            .map(|(_, rest)| rest.trim())
    })?;
    // `.func (.param .b32 func_retval0) name(`: skip the return parameters.
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1.trim(),
        None => rest,
    };
    let name: String = rest.chars().take_while(|c| *c != '(' && !c.is_whitespace()).collect();
    (!name.is_empty()).then_some(name)
}

/// The distinct opcodes of `insts` matching `pred`.
pub(crate) fn ops(insts: &[Inst], pred: impl Fn(&Inst) -> bool) -> BTreeSet<&str> {
    insts.iter().filter(|i| pred(i)).map(|i| i.op.as_str()).collect()
}

pub(crate) fn assert_present(insts: &[Inst], op: &str, why: &str) {
    assert!(
        insts.iter().any(|i| i.op == op),
        "no `{op}` in the PTX: {why}. Atomic opcodes present: {:?}",
        ops(insts, |i| i.is_rmw() || i.order().is_some())
    );
}
