"""Oracle only (tests/robustness/test_masked_pgd.py): cleverhans' PyTorch L∞ PGD as the official
spatial-misalignment code calls it, verbatim (cleverhans-lab/cleverhans v4:
``cleverhans/torch/attacks/projected_gradient_descent.py``, ``fast_gradient_method.py`` and
``cleverhans/torch/utils.py`` ``clip_eta`` / ``optimize_linear``, the L∞ branches kept, the
``norm == 1`` / ``norm == 2`` branches and the sanity asserts left out)."""
import numpy as np
import torch


def clip_eta(eta, norm, eps):
  if norm == np.inf:
    eta = torch.clamp(eta, -eps, eps)
  return eta


def optimize_linear(grad, eps, norm=np.inf):
  optimal_perturbation = torch.sign(grad)
  scaled_perturbation = eps * optimal_perturbation
  return scaled_perturbation


def fast_gradient_method(model_fn, x, eps, norm, loss_fn=None, clip_min=None, clip_max=None, y=None,
                         targeted=False, sanity_checks=False):
    x = x.clone().detach().to(torch.float).requires_grad_(True)
    if y is None:
        # Using model predictions as ground truth to avoid label leaking
        _, y = torch.max(model_fn(x), 1)

    # Compute loss
    if loss_fn is None:
        loss_fn = torch.nn.CrossEntropyLoss()
    loss = loss_fn(model_fn(x), y)
    # If attack is targeted, minimize loss of target label rather than maximize loss of correct label
    if targeted:
        loss = -loss

    # Define gradient of loss wrt input
    loss.backward()
    optimal_perturbation = optimize_linear(x.grad, eps, norm)

    # Add perturbation to original example to obtain adversarial example
    adv_x = x + optimal_perturbation

    # If clipping is needed, reset all values outside of [clip_min, clip_max]
    if (clip_min is not None) or (clip_max is not None):
        adv_x = torch.clamp(adv_x, clip_min, clip_max)
    return adv_x


def projected_gradient_descent(model_fn, x, eps, eps_iter, nb_iter, norm,
                               clip_min=None, clip_max=None, y=None, targeted=False,
                               rand_init=True, rand_minmax=None, sanity_checks=True):
  # Initialize loop variables
  if rand_init:
    if rand_minmax is None:
      rand_minmax = eps
    eta = torch.zeros_like(x).uniform_(-rand_minmax, rand_minmax)
  else:
    eta = torch.zeros_like(x)

  # Clip eta
  eta = clip_eta(eta, norm, eps)
  adv_x = x + eta
  if clip_min is not None or clip_max is not None:
    adv_x = torch.clamp(adv_x, clip_min, clip_max)

  if y is None:
    # Using model predictions as ground truth to avoid label leaking
    _, y = torch.max(model_fn(x), 1)

  i = 0
  while i < nb_iter:
    adv_x = fast_gradient_method(model_fn, adv_x, eps_iter, norm,
                                 clip_min=clip_min, clip_max=clip_max, y=y, targeted=targeted)

    # Clipping perturbation eta to norm norm ball
    eta = adv_x - x
    eta = clip_eta(eta, norm, eps)
    adv_x = x + eta

    # Redo the clipping.
    # FGM already did it, but subtracting and re-adding eta can add some
    # small numerical error.
    if clip_min is not None or clip_max is not None:
      adv_x = torch.clamp(adv_x, clip_min, clip_max)
    i += 1
  return adv_x
