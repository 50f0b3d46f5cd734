//! How the lanes of a warp run: [`Scheduling`].

use std::fmt;

use crate::error::Result;

/// How the lanes of a warp run while a kernel runs: independently, or in lockstep.
///
/// AMD GPUs run the lanes of a wavefront in lockstep. NVIDIA GPUs from Volta (sm_70) on
/// schedule each lane independently, but they run PTX built for an older target (`sm_60`)
/// in lockstep too. The device runtime is written to be correct under both (the lockstep
/// rule in `gpuio_device::protocol::arch`); building the kernels for `sm_60` as well and asking for
/// [`Scheduling::Lockstep`] (`Builder::lockstep`, or `GPUIO_LOCKSTEP=1`) tests AMD's
/// scheduling on NVIDIA hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheduling {
    /// Each lane makes progress on its own: NVIDIA GPUs running code built for sm_70 or
    /// newer, and the CPU backend's threads.
    Independent,
    /// The lanes of a warp run in lockstep: AMD GPUs, and NVIDIA GPUs running PTX built for
    /// a target before sm_70.
    Lockstep,
}

impl Scheduling {
    /// The scheduling NVIDIA GPUs give a PTX module, read from its `.target` directive
    /// (`sm_60`: lockstep, `sm_70` and newer: independent); `None` if it has none.
    ///
    /// ```
    /// use gpuio_host::Scheduling;
    /// assert_eq!(Scheduling::of_ptx(".version 6.2\n.target sm_60\n"), Some(Scheduling::Lockstep));
    /// assert_eq!(Scheduling::of_ptx(".version 7.8\n.target sm_90\n"), Some(Scheduling::Independent));
    /// ```
    pub fn of_ptx(ptx: &str) -> Option<Scheduling> {
        let target = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".target"))?
            .split([',', ' ', '\t'])
            .find(|w| !w.is_empty())?;
        Scheduling::of_sm(target)
    }

    /// The scheduling of code built for the NVIDIA target `sm` (`"sm_60"`, `"sm_90a"`).
    pub fn of_sm(sm: &str) -> Option<Scheduling> {
        let digits: String = sm
            .strip_prefix("sm_")?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let n: u32 = digits.parse().ok()?;
        Some(if n < 70 {
            Scheduling::Lockstep
        } else {
            Scheduling::Independent
        })
    }

    /// `GPUIO_LOCKSTEP`: `1`/`on`/`true` asks for lockstep, `0`/`off`/`false` (or unset,
    /// or empty) for the default; anything else is an error naming the variable.
    pub fn lockstep_from_env() -> Result<Option<bool>> {
        crate::settings::switch("GPUIO_LOCKSTEP")
    }
}

impl fmt::Display for Scheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheduling::Independent => "independent thread scheduling",
            Scheduling::Lockstep => "lockstep scheduling",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Scheduling;

    #[test]
    fn reads_the_ptx_target() {
        assert_eq!(
            Scheduling::of_ptx("//\n.version 6.2\n.target sm_60\n"),
            Some(Scheduling::Lockstep)
        );
        assert_eq!(
            Scheduling::of_ptx(".target sm_90a, texmode_independent"),
            Some(Scheduling::Independent)
        );
        assert_eq!(Scheduling::of_ptx(".target sm_70"), Some(Scheduling::Independent));
        assert_eq!(Scheduling::of_ptx(".target compute_60"), None);
        assert_eq!(Scheduling::of_ptx("no target here"), None);
        assert_eq!(Scheduling::of_sm("sm_61"), Some(Scheduling::Lockstep));
        assert_eq!(Scheduling::of_sm("gfx90a"), None);
    }
}
