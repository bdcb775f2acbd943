//! Which instruction-set tier benchctl's hand-written kernels run on.
//!
//! Every hand-written kernel (the encoders' fused activations and attention, the gallery's
//! dot product, integer screen and lane classification, the retrieval scan) is compiled
//! once per tier and picked at run time through this crate, so a binary built for any
//! x86-64 runs the best code the CPU has:
//!
//! | tier | needs | where |
//! |---|---|---|
//! | `avx512` | AVX-512 F/BW/DQ/VL, AVX2, FMA | Intel Skylake-SP and later, AMD Zen 4 and later |
//! | `avx2` | AVX2, FMA | Intel Haswell and later, AMD Zen 1–3, most laptops and cloud VMs |
//! | `generic` | nothing | every target (on aarch64 it is NEON code, FMA included) |
//!
//! The tier is the best the CPU supports, unless the environment variable `BENCHCTL_CPU`
//! (`generic`, `avx2` or `avx512`) asks for a lower one; it is read once, on first use. A
//! [`Tier`] value can only be made for a tier the CPU supports, which is what makes calling
//! a tier's `#[target_feature]` code sound.
//!
//! Bodies are written once, as `#[inline(always)]` functions generic over
//! `const FUSED: bool` (whether `a·b + c` may be one fused multiply-add), and [`per_tier!`]
//! compiles them per tier. On x86-64 the generic tier has no FMA instruction, so it gets
//! `FUSED = false` (`f32::mul_add` there would be a library call per element); on targets
//! where FMA is part of the baseline (aarch64) it gets `FUSED = true`.

use std::io::Write;
use std::sync::OnceLock;

/// The instruction sets a kernel can be compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Generic,
    Avx2,
    Avx512,
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Generic, Isa::Avx2, Isa::Avx512];

    /// The name `BENCHCTL_CPU` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Generic => "generic",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    pub fn parse(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this CPU can run code compiled for the tier.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Generic => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A tier this CPU supports. Only [`Tier::current`], [`Tier::new`] and [`Tier::available`]
/// make one, and each checks the CPU: holding a `Tier` is the proof that its code may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tier(Isa);

/// The environment variable that forces a lower tier.
pub const ENV: &str = "BENCHCTL_CPU";

/// What `BENCHCTL_CPU` asks for, checked against the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Unset or empty: the best tier.
    Best,
    /// A tier the CPU supports.
    Forced(Isa),
    /// A tier this CPU cannot run; the best one runs instead.
    Unsupported(Isa),
    /// Not a tier's name.
    Unknown(String),
}

impl Request {
    /// What `BENCHCTL_CPU` holds now.
    pub fn from_env() -> Request {
        Request::parse(std::env::var(ENV).ok().as_deref())
    }

    pub fn parse(value: Option<&str>) -> Request {
        match value.map(str::trim) {
            None | Some("") => Request::Best,
            Some(name) => match Isa::parse(name) {
                Some(isa) if isa.is_supported() => Request::Forced(isa),
                Some(isa) => Request::Unsupported(isa),
                None => Request::Unknown(name.to_string()),
            },
        }
    }

    /// Why the request cannot be honoured, as an error message (`None` when it can).
    pub fn problem(&self) -> Option<String> {
        match self {
            Request::Best | Request::Forced(_) => None,
            Request::Unsupported(isa) => {
                Some(format!("{ENV}={isa} asks for a tier this CPU cannot run (it runs up to {})", Tier::best().isa()))
            }
            Request::Unknown(name) => Some(format!("{ENV}={name} is not a tier (generic, avx2, avx512)")),
        }
    }
}

impl Tier {
    /// The tier every kernel runs on in this process: `BENCHCTL_CPU` if set to a tier the
    /// CPU supports, the best one otherwise (with one warning on stderr; the runner refuses
    /// such a value before any work, see [`Request::problem`]). Read once.
    pub fn current() -> Tier {
        static CURRENT: OnceLock<Tier> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let request = Request::from_env();
            if let Some(problem) = request.problem() {
                // A closed stderr is no error (`eprintln!` would panic on it).
                let _ = writeln!(std::io::stderr(), "warning: {problem}; using {}", Tier::best().isa());
            }
            match request {
                Request::Forced(isa) => Tier(isa),
                _ => Tier::best(),
            }
        })
    }

    /// The best tier this CPU supports.
    pub fn best() -> Tier {
        let isa = Isa::ALL.into_iter().rev().find(|isa| isa.is_supported()).unwrap_or(Isa::Generic);
        Tier(isa)
    }

    /// The tier for `isa`, if this CPU supports it.
    pub fn new(isa: Isa) -> Option<Tier> {
        isa.is_supported().then_some(Tier(isa))
    }

    /// The generic tier, which every CPU supports.
    pub fn generic() -> Tier {
        Tier(Isa::Generic)
    }

    /// Every tier this CPU supports, lowest first (for tests and benchmarks that compare them).
    pub fn available() -> Vec<Tier> {
        Isa::ALL.into_iter().filter_map(Tier::new).collect()
    }

    pub fn isa(self) -> Isa {
        self.0
    }

    /// Whether this CPU also has 16-bit integer dot products (`vpdpwssd`) at this tier:
    /// AVX-512 VNNI on `avx512`, AVX-VNNI (VEX-encoded, 256-bit) on `avx2`.
    pub fn has_vnni(self) -> bool {
        match self.0 {
            Isa::Generic => false,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512vnni"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Whether the generic tier may fuse `a·b + c`: only where FMA is an instruction of the
/// target's baseline (aarch64 always; x86-64 only when the whole build enables `fma`).
pub const GENERIC_FUSED: bool = cfg!(any(target_arch = "aarch64", all(target_arch = "x86_64", target_feature = "fma")));

/// `a·b + c`: one fused multiply-add (one rounding) when `FUSED`, a product and a sum (two
/// roundings) otherwise. Callers pass their tier's `FUSED`, so this is one instruction on
/// every tier and never a library call.
#[inline(always)]
pub fn madd<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Compiles an `#[inline(always)]` body, generic over `const FUSED: bool`, once per tier, as
/// a function that takes the [`Tier`] first:
///
/// ```
/// #[inline(always)]
/// fn sum_of_products<const FUSED: bool>(a: &[f32], b: &[f32]) -> f32 {
///     a.iter().zip(b).fold(0.0, |s, (x, y)| benchctl_cpu::madd::<FUSED>(*x, *y, s))
/// }
/// benchctl_cpu::per_tier!(fn sum_of_products_on = sum_of_products(a: &[f32], b: &[f32]) -> f32);
///
/// let x = [1.0, 2.0, 3.0];
/// for tier in benchctl_cpu::Tier::available() {
///     assert_eq!(sum_of_products_on(tier, &x, &x), 14.0);
/// }
/// ```
///
/// `fused = false` instead of the default compiles every tier unfused (for results that
/// must be bit-identical on every machine).
#[macro_export]
macro_rules! per_tier {
    ($(#[$meta:meta])* $vis:vis fn $name:ident = $body:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $crate::per_tier!($(#[$meta])* $vis fn $name = $body($($arg: $ty),*) $(-> $ret)?; fused = true);
    };
    ($(#[$meta:meta])* $vis:vis fn $name:ident = $body:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?; fused = $fused:expr) => {
        $(#[$meta])*
        $vis fn $name(tier: $crate::Tier, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                $body::<{ $fused }>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                $body::<{ $fused }>($($arg),*)
            }
            match tier.isa() {
                // SAFETY: a `Tier` exists only for a tier the CPU supports.
                #[cfg(target_arch = "x86_64")]
                $crate::Isa::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => $body::<{ $fused && $crate::GENERIC_FUSED }>($($arg),*),
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_and_checked_against_the_cpu() {
        assert_eq!(Request::parse(None), Request::Best);
        assert_eq!(Request::parse(Some(" ")), Request::Best);
        assert_eq!(Request::parse(Some("GENERIC")), Request::Forced(Isa::Generic));
        assert!(matches!(Request::parse(Some("sse9")), Request::Unknown(n) if n == "sse9"));
        assert!(Request::parse(Some("sse9")).problem().is_some_and(|p| p.contains("BENCHCTL_CPU=sse9 is not a tier")));
        for isa in [Isa::Avx2, Isa::Avx512] {
            let request = Request::parse(Some(isa.name()));
            if isa.is_supported() {
                assert_eq!(request, Request::Forced(isa));
                assert!(request.problem().is_none());
            } else {
                assert_eq!(request, Request::Unsupported(isa));
                assert!(request.problem().is_some_and(|p| p.contains("cannot run")));
            }
        }
    }

    #[test]
    fn tiers_exist_only_where_the_cpu_runs_them() {
        let available = Tier::available();
        assert_eq!(available[0], Tier::generic());
        assert_eq!(available.last(), Some(&Tier::best()));
        for isa in Isa::ALL {
            assert_eq!(Tier::new(isa).is_some(), isa.is_supported(), "{isa}");
        }
        // The current tier is the requested one when that is supported.
        match Request::from_env() {
            Request::Forced(isa) => assert_eq!(Tier::current().isa(), isa),
            _ => assert_eq!(Tier::current(), Tier::best()),
        }
    }

    #[inline(always)]
    fn fused_or_not<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
        madd::<FUSED>(a, b, c)
    }
    per_tier!(fn fused_on = fused_or_not(a: f32, b: f32, c: f32) -> f32);
    per_tier!(fn unfused_on = fused_or_not(a: f32, b: f32, c: f32) -> f32; fused = false);

    #[test]
    fn fused_tiers_round_once_and_unfused_ones_twice() {
        // (1 + 2⁻²³)² − 1 = 2⁻²² + 2⁻⁴⁶: the product rounded first loses the 2⁻⁴⁶.
        let a = 1.0 + f32::EPSILON;
        let (fused, unfused) = (2f32.powi(-22) + 2f32.powi(-46), 2f32.powi(-22));
        for tier in Tier::available() {
            assert_eq!(unfused_on(tier, a, a, -1.0), unfused, "{:?}", tier);
            let expected = if tier.isa() == Isa::Generic && !GENERIC_FUSED { unfused } else { fused };
            assert_eq!(fused_on(tier, a, a, -1.0), expected, "{:?}", tier);
        }
    }
}
