//! A full-size architecture cut to a few layers, every width kept: the shapes of a model this
//! machine cannot hold (`bench scoring --layers`).

use crate::checkpoint::ModelConfig;
use crate::config::LayerKind;
use crate::families::gemma4::Gemma4Text;

/// The architecture cut to `layers` text layers and as many vision blocks, every width kept: the
/// full-size shapes on a machine that cannot hold the whole model (`bench scoring --layers`).
/// Block indexes (full attention, DeepStack) map proportionally into the slice, so a Qwen3-VL
/// slice keeps DeepStack.
pub fn slice(config: &ModelConfig, layers: usize) -> ModelConfig {
    let mut c = config.clone();
    let depth = c.vision.depth;
    if layers == 0 || (layers >= depth && layers >= c.text.num_hidden_layers) {
        return c;
    }
    let blocks = layers.min(depth);
    let map = |indexes: &[usize]| {
        let mut mapped: Vec<usize> = indexes.iter().map(|&i| i * blocks / depth).collect();
        mapped.dedup();
        mapped
    };
    c.vision.fullatt_block_indexes = map(&c.vision.fullatt_block_indexes);
    c.vision.deepstack_visual_indexes = map(&c.vision.deepstack_visual_indexes);
    c.vision.deepstack_visual_indexes.truncate(layers.min(c.text.num_hidden_layers));
    c.vision.depth = blocks;
    c.text.num_hidden_layers = layers.min(c.text.num_hidden_layers);
    // A hybrid stack's slice keeps both layer kinds: its first layers, the last made full
    // attention if none of them is.
    c.text.layer_types.truncate(c.text.num_hidden_layers);
    let hybrid = config.text.layer_types.contains(&LayerKind::LinearAttention);
    if hybrid && c.text.layer_types.len() >= 2 && !c.text.layer_types.contains(&LayerKind::FullAttention) {
        *c.text.layer_types.last_mut().expect("two or more") = LayerKind::FullAttention;
    }
    if let Some(moe) = &mut c.text.moe {
        moe.sparse_layers.truncate(c.text.num_hidden_layers);
    }
    // Gemma 4's slice: its first layers, the last made a full-attention layer (with the full
    // layers' shape) if none is. A KV-shared layer in the slice keeps its sharing (and a double
    // width where the model has one): the layer it reads comes before it.
    if let (Some(g), Some(full)) =
        (c.text.own.get_mut::<Gemma4Text>(), config.text.own.get::<Gemma4Text>().and_then(|g| g.layers.iter().find(|l| !l.sliding)))
    {
        g.layers.truncate(c.text.num_hidden_layers);
        if !g.layers.iter().any(|l| !l.sliding) {
            *g.layers.last_mut().expect("one or more layers") = full.clone();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flops::tests::bench_config;

    /// Two layers each, the widths kept; the block indexes follow into the slice.
    #[test]
    fn slices_keep_the_widths_and_map_the_block_indexes() {
        let (c, _) = bench_config("qwen3_vl_8b");
        let s = slice(&c, 2);
        assert_eq!((s.text.num_hidden_layers, s.vision.depth, s.text.hidden_size, s.vision.hidden_size), (2, 2, 4096, 1152));
        assert_eq!(s.vision.deepstack_visual_indexes, vec![0, 1]);
        let (c, _) = bench_config("qwen2_5_vl_7b");
        assert_eq!(slice(&c, 2).vision.fullatt_block_indexes, vec![0, 1]);
        assert_eq!(slice(&c, 0), c);
        // A hybrid stack's slice keeps one layer of each kind.
        let (c, _) = bench_config("qwen3_5_9b");
        assert_eq!(slice(&c, 2).text.layer_types, vec![LayerKind::LinearAttention, LayerKind::FullAttention]);
        // Gemma 4 E4B's KV-shared layers, from the 25th on, keep their sharing.
        let (c, _) = bench_config("gemma4_e4b");
        let shared =
            |layers: usize| slice(&c, layers).text.own.get::<Gemma4Text>().unwrap().layers.iter().filter(|l| l.kv_from.is_some()).count();
        assert_eq!((shared(6), shared(24), shared(26)), (0, 0, 2));
    }
}
