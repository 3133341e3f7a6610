/* The model as a backend takes it: the checkpoint's config becomes a la_backend_shape
 * (sizes, RoPE inverse frequencies) and its weights a la_weight_table of tensor views, so
 * that backends never see model/ (DESIGN.md §6: backends take shapes, not configs). */
#ifndef LA_ENGINE_BACKEND_MODEL_H
#define LA_ENGINE_BACKEND_MODEL_H

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

/* Fill *shape from cfg. inv_freq: the caller's [cfg->head_dim / 2] f32 array, filled by
 * la_rope_inv_freq; shape->rope_inv_freq points at it. */
void la_backend_shape_from_config(const la_model_config *cfg, float *inv_freq, la_backend_shape *shape);

/* Load cfg's model into be (be->ops->load_weights with the shape from cfg and a table of
 * w's tensors, both freed before returning). w == NULL: random weights of cfg's shape.
 * Errors: LA_ERR_NO_MEMORY, and the backend's load_weights errors. */
la_status la_backend_load_model(la_backend *be, const la_model_config *cfg, const la_weights *w, la_err *err);

#endif
