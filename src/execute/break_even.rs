//! Break-even per layer (issues 20 and 21): a slice that times the same weights at several
//! token counts — a checkpoint's or a named model's `tokens: [1, 16, 512]`, whose ops are
//! named `<layer>@<tokens>` — reports per layer its per-op speedups and where they cross 1,
//! so "sparse wins below M tokens on this CPU" is an answer the gate gives, in the memo.

use super::bench::{Interval, break_even};
use super::{LayerBreakEven, OpCost, TokenSpeedup};
use crate::domain::GemmOp;

/// One layer's name, weight shape `(n, k)`, and its ops as `(tokens, op name)`.
type Layer<'a> = (&'a str, (usize, usize), Vec<(u64, &'a str)>);

/// Per layer timed at two or more token counts (ops of one name before `@`, with the same
/// weights' shape): its per-op speedups, the range over runs as their interval (exact on the
/// simulator), and where they cross 1. Layers in the order of their first op; empty when no
/// layer has two counts, or when per-op timing did not happen (a failed slice).
pub(crate) fn per_layer(ops: &[GemmOp], costs: &[OpCost]) -> Vec<LayerBreakEven> {
    let mut layers: Vec<Layer<'_>> = Vec::new();
    for op in ops {
        let Some((layer, tokens)) = op.layer_at_tokens() else {
            continue;
        };
        match layers
            .iter_mut()
            .find(|(l, shape, _)| *l == layer && *shape == (op.n, op.k))
        {
            Some((_, _, points)) => points.push((tokens, &op.name)),
            None => layers.push((layer, (op.n, op.k), vec![(tokens, &op.name)])),
        }
    }
    layers
        .into_iter()
        .filter(|(_, _, points)| points.len() >= 2)
        .filter_map(|(layer, _, mut named)| {
            named.sort_by_key(|&(tokens, _)| tokens);
            let points: Vec<TokenSpeedup> = named
                .iter()
                .map(|&(tokens, op)| {
                    let cost = costs.iter().find(|c| c.op == op)?;
                    let speedup = cost.comparator_s / cost.candidate_s;
                    let [low, high] = cost.speedup_range.unwrap_or([speedup, speedup]);
                    speedup.is_finite().then_some(TokenSpeedup {
                        tokens,
                        speedup,
                        low,
                        high,
                    })
                })
                .collect::<Option<_>>()?;
            let intervals: Vec<(usize, Interval)> = points
                .iter()
                .map(|p| {
                    let interval = Interval {
                        estimate: p.speedup,
                        low: Some(p.low),
                        high: Some(p.high),
                        confidence: 1.0,
                    };
                    (usize::try_from(p.tokens).unwrap_or(usize::MAX), interval)
                })
                .collect();
            Some(LayerBreakEven {
                tensor: layer.to_owned(),
                break_even: break_even(&intervals),
                points,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, m: usize, n: usize, k: usize) -> GemmOp {
        GemmOp {
            name: name.into(),
            m,
            n,
            k,
        }
    }

    fn cost(op: &str, candidate_s: f64, comparator_s: f64) -> OpCost {
        OpCost {
            op: op.into(),
            candidate_s,
            comparator_s,
            passes: 5,
            candidate_energy_j: None,
            comparator_energy_j: None,
            fidelity: None,
            speedup_range: None,
        }
    }

    #[test]
    fn layers_timed_at_several_counts_get_their_crossing_and_others_none() {
        let ops = [
            op("down@16", 16, 64, 128),
            op("down@1", 1, 64, 128),
            op("up@1", 1, 128, 64),
            op("qkv", 1, 64, 64),
            op("odd@x", 1, 64, 64),
        ];
        let costs = [
            cost("down@1", 1.0, 2.0),
            cost("down@16", 2.0, 1.0),
            cost("up@1", 1.0, 1.5),
            cost("qkv", 1.0, 1.0),
        ];
        let layers = per_layer(&ops, &costs);
        assert_eq!(layers.len(), 1, "{layers:?}");
        let down = &layers[0];
        assert_eq!(down.tensor, "down");
        // Sorted by tokens whatever the op order; 2× at 1 token, 0.5× at 16.
        assert_eq!(down.points.iter().map(|p| p.tokens).collect::<Vec<_>>(), [1, 16]);
        assert_eq!(down.break_even.wins_through, Some(1));
        assert_eq!(down.break_even.loses_from, Some(16));
        let crossing = down.break_even.tokens.expect("crosses 1");
        assert!((1.0..16.0).contains(&crossing), "{crossing}");
    }

    #[test]
    fn a_layer_without_its_per_op_cost_reports_nothing() {
        let ops = [op("down@1", 1, 64, 128), op("down@16", 16, 64, 128)];
        assert!(per_layer(&ops, &[cost("down@1", 1.0, 2.0)]).is_empty());
    }
}
