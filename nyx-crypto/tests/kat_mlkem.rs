//! ML-KEM-768 known-answer test: the C2SP CCTV "accumulated pq-crystals vectors".
//!
//! Origin: https://c2sp.org/CCTV/ML-KEM (github.com/C2SP/CCTV, `ML-KEM/README.md`, section
//! "Accumulated pq-crystals vectors", the version targeting final FIPS 203), CC0 1.0. The
//! procedure is reproduced from that description; the expected hash is copied from it.
//!
//! A SHAKE-128 instance with empty input is the deterministic RNG. For each of 10 000 tests it
//! yields `d`, `z` (key generation), `m` (encapsulation) and a random 1088-byte ciphertext; the
//! test writes `ek`, `dk` (expanded), `ct`, `K` from encapsulation (checked against
//! decapsulation of `ct`), and `K` from decapsulating the random ciphertext (implicit
//! rejection) into a second SHAKE-128 instance, whose first 32 output bytes must equal the
//! published value. This covers key generation, encapsulation, decapsulation and implicit
//! rejection of the `ml-kem` crate NyxNet uses, across randomly reachable edge cases.

#[allow(deprecated)]
use ml_kem::ExpandedKeyEncoding;
use ml_kem::array::Array;
use ml_kem::{Ciphertext, Decapsulate, DecapsulationKey, KeyExport, MlKem768, Seed};
use sha3::Shake128;
use sha3::digest::{ExtendableOutput, Update, XofReader};

const TESTS: usize = 10_000;
/// CCTV, "The resulting hashes for 10 000 consecutive tests", ML-KEM-768 (final FIPS 203).
const EXPECTED: &str = "f959d18d3d1180121433bf0e05f11e7908cf9d03edc150b2b07cb90bef5bc1c1";

#[test]
fn ml_kem_768_accumulated_cctv_vectors() {
    let mut rng = Shake128::default().finalize_xof();
    let mut acc = Shake128::default();
    let mut first = [0u8; 16];
    {
        // The README gives the start of the RNG stream; check our RNG matches it.
        let mut probe = Shake128::default().finalize_xof();
        probe.read(&mut first);
        assert_eq!(hex(&first), "7f9c2ba4e88f827d616045507605853e");
    }
    for _ in 0..TESTS {
        let mut seed = [0u8; 64];
        rng.read(&mut seed); // d || z
        let mut m = [0u8; 32];
        rng.read(&mut m);
        let mut bad_ct = [0u8; 1088];
        rng.read(&mut bad_ct);

        let dk = DecapsulationKey::<MlKem768>::from_seed(Seed::from(seed));
        let ek = dk.encapsulation_key();
        acc.update(&ek.to_bytes());
        #[allow(deprecated)]
        acc.update(&dk.to_expanded_bytes());
        let (ct, k) = ek.encapsulate_deterministic(&Array::from(m));
        acc.update(&ct);
        acc.update(&k);
        assert_eq!(
            dk.decapsulate(&ct),
            k,
            "decapsulation disagrees with encapsulation"
        );
        let rejected = dk.decapsulate(&Ciphertext::<MlKem768>::from(bad_ct));
        acc.update(&rejected);
    }
    let mut out = [0u8; 32];
    acc.finalize_xof().read(&mut out);
    assert_eq!(hex(&out), EXPECTED);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
