//! Which implementation computes ChaCha20, chosen once per operation from what the CPU
//! reports.

/// A ChaCha20 implementation. [`Backend::detect`] picks the fastest this CPU supports; the
/// explicit choice exists for tests and benchmarks. Asking for a backend the CPU lacks is
/// safe: it runs the portable one instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Runs everywhere: the keystream from RustCrypto's `chacha20` crate (its NEON code on
    /// AArch64, SSE2 or AVX2 picked at run time on x86), Poly1305 from this crate's scalar
    /// code, one after the other. It is what non-x86 CPUs, and x86 CPUs without AVX2, run.
    Portable,
    /// Eight blocks at a time in 256-bit AVX2 registers, a message's last one to four blocks
    /// four at a time (x86-64 CPUs from 2013 on).
    Avx2,
    /// As [`Backend::Avx2`], plus AVX-512VL's rotate instruction and its 32 vector
    /// registers, still on 256-bit vectors, and sixteen blocks at a time in 512-bit ones for
    /// long keystream (twenty, the sixteen beside four in 256-bit vectors, for 17-20 blocks)
    /// (x86-64 CPUs with AVX-512: Intel from 2017, AMD from Zen 4).
    Avx512Vl,
    /// As [`Backend::Avx512Vl`], with Poly1305 four blocks at a time in vector lanes on
    /// AVX-512 IFMA's 52-bit multipliers (Intel from Ice Lake, AMD from Zen 4).
    Avx512Ifma,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 4] = [
        Backend::Portable,
        Backend::Avx2,
        Backend::Avx512Vl,
        Backend::Avx512Ifma,
    ];

    /// The fastest backend this CPU supports.
    pub fn detect() -> Backend {
        Backend::ALL
            .into_iter()
            .rev()
            .find(|b| b.is_available())
            .unwrap_or(Backend::Portable)
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => crate::x86::Simd::avx2().is_some(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Vl => crate::x86::Simd::avx512vl().is_some(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Ifma => crate::x86::Simd::avx512ifma().is_some(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// A short name for reports and benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Portable => "portable",
            Backend::Avx2 => "avx2",
            Backend::Avx512Vl => "avx512vl",
            Backend::Avx512Ifma => "avx512ifma",
        }
    }

    /// The kernel to run: this backend if the CPU has it, else the portable one.
    pub(crate) fn kernel(self) -> Kernel {
        match self {
            Backend::Portable => Kernel::Portable,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => crate::x86::Simd::avx2().map_or(Kernel::Portable, Kernel::Simd),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Vl => {
                crate::x86::Simd::avx512vl().map_or(Kernel::Portable, Kernel::Simd)
            }
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Ifma => {
                crate::x86::Simd::avx512ifma().map_or(Kernel::Portable, Kernel::Simd)
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => Kernel::Portable,
        }
    }
}

/// A backend whose CPU support has been checked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kernel {
    /// `portable.rs`: RustCrypto's keystream and the scalar Poly1305.
    Portable,
    /// The x86-64 kernels (`x86.rs`), with Poly1305 stitched in (`stitched.rs`).
    #[cfg(target_arch = "x86_64")]
    Simd(crate::x86::Simd),
}
