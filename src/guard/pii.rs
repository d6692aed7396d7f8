//! Optional PII detectors (off unless a tier or upstream names them in `pii`): e-mail
//! addresses, payment card numbers that pass the Luhn check, IBANs that pass their mod-97
//! check. The checks keep order numbers and ids that merely look like them out.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::secrets::Hit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pii {
    Email,
    PaymentCard,
    Iban,
}

type Pattern = LazyLock<Option<Regex>>;

static EMAIL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}(?-u:\b)").ok()
});
static CARD: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?-u:\b)\d(?:[ -]?\d){12,18}(?-u:\b)").ok());
static IBAN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?-u:\b)[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?-u:\b)").ok());

impl Pii {
    pub const ALL: [Pii; 3] = [Pii::Email, Pii::PaymentCard, Pii::Iban];

    pub fn name(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::PaymentCard => "payment_card",
            Self::Iban => "iban",
        }
    }

    /// This detector's matches in `text`, added to `hits`.
    pub fn scan(self, text: &str, hits: &mut Vec<Hit>) {
        let (re, valid): (&Pattern, fn(&str) -> bool) = match self {
            Self::Email => (&EMAIL, |_| true),
            Self::PaymentCard => (&CARD, luhn),
            Self::Iban => (&IBAN, iban),
        };
        let Some(re) = re.as_ref() else {
            return;
        };
        hits.extend(
            re.find_iter(text)
                .filter(|m| valid(m.as_str()))
                .map(|m| Hit {
                    detector: self.name(),
                    range: m.range(),
                }),
        );
    }
}

/// The Luhn check of a card number (spaces and dashes ignored).
fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match i % 2 {
            1 if d * 2 > 9 => d * 2 - 9,
            1 => d * 2,
            _ => d,
        })
        .sum();
    (13..=19).contains(&digits.len()) && sum.is_multiple_of(10)
}

/// The ISO 13616 check: the country and check digits moved to the end, letters as numbers,
/// the whole modulo 97 is 1.
fn iban(s: &str) -> bool {
    let compact: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() < 15 || compact.len() > 34 {
        return false;
    }
    let mut rem = 0u32;
    for c in compact[4..].iter().chain(&compact[..4]) {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        rem = if v > 9 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(p: Pii, text: &str) -> usize {
        let mut hits = Vec::new();
        p.scan(text, &mut hits);
        hits.len()
    }

    #[test]
    fn each_finds_its_kind_and_checks_keep_lookalikes_out() {
        assert_eq!(
            found(Pii::Email, "write to ann.lee+x@mail.example.org today"),
            1
        );
        assert_eq!(found(Pii::Email, "user@host has no domain"), 0);
        assert_eq!(found(Pii::PaymentCard, "card 4111 1111 1111 1111 ok"), 1);
        assert_eq!(
            found(Pii::PaymentCard, "order 4111 1111 1111 1112"),
            0,
            "Luhn fails"
        );
        assert_eq!(found(Pii::Iban, "IBAN GB82 WEST 1234 5698 7654 32"), 1);
        assert_eq!(
            found(Pii::Iban, "GB83 WEST 1234 5698 7654 32"),
            0,
            "mod 97 fails"
        );
    }
}
