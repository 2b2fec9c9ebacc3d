"""Oracle only (tests/robustness/test_misalignment_metrics.py): the official functions of the spatial
misalignment benchmark, verbatim, run on the same maps as metrics/misalignment.py.

Sources (Sacha et al., AAAI 2024, the benchmark's ``spatial_alignment_test/``, re-used by ProtoViT,
Henrymachiyu/ProtoViT):
* ``get_activation_change_metrics``: ``spatial_alignment_test/run_adversarial_test.py``;
* ``get_all_class_proto_low_activation_bbox_mask``: ``spatial_alignment_test/adversarial_modification.py``;
* ``find_high_activation_crop``: ProtoPNet ``helpers.py`` (cfchen-duke/ProtoPNet), which the former imports.
``img_size`` is the module global the official ``settings.py`` provides; the tests set it.
"""
from typing import List

import cv2
import numpy as np
import torch

img_size = 224


def find_high_activation_crop(activation_map, percentile=95):
    threshold = np.percentile(activation_map, percentile)
    mask = np.ones(activation_map.shape)
    mask[activation_map < threshold] = 0
    lower_y, upper_y, lower_x, upper_x = 0, 0, 0, 0
    for i in range(mask.shape[0]):
        if np.amax(mask[i]) > 0.5:
            lower_y = i
            break
    for i in reversed(range(mask.shape[0])):
        if np.amax(mask[i]) > 0.5:
            upper_y = i
            break
    for j in range(mask.shape[1]):
        if np.amax(mask[:,j]) > 0.5:
            lower_x = j
            break
    for j in reversed(range(mask.shape[1])):
        if np.amax(mask[:,j]) > 0.5:
            upper_x = j
            break
    return lower_y, upper_y+1, lower_x, upper_x+1


def get_all_class_proto_low_activation_bbox_mask(
        proto_nums: List[np.ndarray],
        activations: np.ndarray,
        epsilon_pixels: int = 10,
) -> np.ndarray:
    assert len(proto_nums) == activations.shape[0]
    img_mask = np.ones((activations.shape[0], 1, img_size, img_size), dtype=np.float32)

    for sample_i in range(activations.shape[0]):
        for proto_num in proto_nums[sample_i]:
            proto_patch_activation = activations[sample_i, proto_num, :, :]
            proto_pixel_activation = cv2.resize(proto_patch_activation,
                                                dsize=(img_size, img_size),
                                                interpolation=cv2.INTER_CUBIC)
            high_act_original_proto = find_high_activation_crop(proto_pixel_activation)

            img_mask[sample_i, :,
            max(high_act_original_proto[0] - epsilon_pixels, 0):
            min(high_act_original_proto[1] + epsilon_pixels, img_size - 1),
            max(high_act_original_proto[2] - epsilon_pixels, 0):
            min(high_act_original_proto[3] + epsilon_pixels, img_size - 1)
            ] = 0
    return img_mask


def get_activation_change_metrics(act_before, act_after, proto_nums, cls_proto_nums):
    metrics = {}

    protos_act_before = act_before[proto_nums]
    protos_act_after = act_after[proto_nums]

    # for each prototype, get its maximum activation over all patches
    max_activations_before = np.max(protos_act_before.reshape(protos_act_before.shape[0], -1), axis=-1)
    max_activations_after = np.max(protos_act_after.reshape(protos_act_after.shape[0], -1), axis=-1)

    # as a metric, calculate activation change of the top activated prototype
    argmax_act = np.argmax(max_activations_before)
    top_proto_act_before, top_proto_act_after = float(max_activations_before[argmax_act]), \
        float(max_activations_after[argmax_act])

    metrics['PAC'] = (1 - top_proto_act_after / top_proto_act_before) * 100

    # as a metric, calculate relative change of "place" in argsort over all prototypes, of the top activated prototype
    max_activations_before = np.max(act_before.reshape(act_before.shape[0], -1), axis=-1)
    max_activations_after = np.max(act_after.reshape(act_after.shape[0], -1), axis=-1)

    cls_proto_nums = set(cls_proto_nums)
    non_cls_proto_nums = np.asarray([i for i in range(act_before.shape[0]) if i not in cls_proto_nums])
    argmax_place_before = float(np.sum(max_activations_before[non_cls_proto_nums] >
                                       max_activations_before[proto_nums[argmax_act]]))
    argmax_place_after = float(np.sum(max_activations_after[non_cls_proto_nums] >
                                      max_activations_after[proto_nums[argmax_act]]))
    metrics['PRC'] = argmax_place_after - argmax_place_before

    # get mIOU of high activated region before anda after the modification
    protos_act_before = act_before[proto_nums[argmax_act]]
    protos_act_after = act_after[proto_nums[argmax_act]]

    proto_act_before = torch.nn.functional.interpolate(torch.tensor(protos_act_before).unsqueeze(0).unsqueeze(0),
                                                       size=(img_size, img_size),
                                                       mode='bilinear')
    proto_act_before = proto_act_before.squeeze(0).squeeze(0)
    proto_act_after = torch.nn.functional.interpolate(torch.tensor(protos_act_after).unsqueeze(0).unsqueeze(0),
                                                      size=(img_size, img_size),
                                                      mode='bilinear')
    proto_act_after = proto_act_after.squeeze(0).squeeze(0)

    quantile_before = torch.quantile(proto_act_before.flatten(), q=0.9, dim=-1)
    high_act_before = proto_act_before > quantile_before
    quantile_after = torch.quantile(proto_act_after.flatten(), q=0.9, dim=-1)
    high_act_after = proto_act_after > quantile_after

    if torch.sum(high_act_after | high_act_before).item() != 0:
        iou = torch.sum(high_act_after & high_act_before) / torch.sum(high_act_after | high_act_before)
        iou = float(iou.item())
        metrics['PLC'] = 100*(1-iou)
    else:
        metrics['PLC'] = 0.0

    return metrics
