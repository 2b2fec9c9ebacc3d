# ruff: noqa
# fmt: off
"""The official FunnyBirds protocols, verbatim: the oracle of tests/metrics/test_funnybirds_protocols.py.

Source: repository visinf/funnybirds-framework, commit 1350bbe812ff18df25b2708df861245b9a63b9c9 (Apache License 2.0, its LICENSE file;
Copyright the FunnyBirds authors, Hesse, Schaub-Meyer and Roth, ICCV 2023). Run here only as a test
oracle, as issue 56 asks; not part of the suite. Below, unchanged:

* datasets/funny_birds.py lines 1-5, 8-79, 120-127, 164-225, 256-end (imports, FunnyBirds.__init__,
  __len__, __getitem__, get_params_for_single, class_distance, get_classes_with_distance_n,
  get_minimal_sufficient_part_sets, get_intervention, get_background_intervention). Left out: line 6-7
  (requests; base64.decodestring, removed in Python 3.9) and the rendering methods (a render
  server), which the protocols do not call.
* explainers/explainer_wrapper.py lines 1-2, 5-6, 13-123 (AbstractExplainer, AbstractAttributionExplainer);
  its captum and ViT imports left out (the oracle explainer subclasses AbstractAttributionExplainer).
* evaluation_protocols.py lines 1-3, 5-6 and 103-end (every protocol but accuracy); line 8 (the
  import of FunnyBirds) is left out: the class is defined above.
* evaluate_explainability.py lines 140-147 (the best-threshold rule), as the function
  best_threshold_rule (the only added lines: its def and return).

The protocols call .cuda(args.gpu) unguarded: the test patches torch.Tensor.cuda to the
identity while it runs them on the CPU.
"""
# ---- datasets/funny_birds.py
import os
import io
import torch
import json
from PIL import Image, ImageDraw
import numpy as np
import random
import itertools

from torch.utils.data import Dataset, DataLoader
from torchvision import transforms

class FunnyBirds(Dataset):
    """FunnyBirds dataset."""

    def __init__(self, root_dir, mode, get_part_map=False, transform=None):
        """
        Args:
            root_dir (string): Directory with all the images. E.g. ./datasets/FunnyBirds
            transform (callable, optional): Optional transform to be applied
                on a sample.
        """
        self.root_dir = root_dir
        self.mode = mode
        self.get_part_map = get_part_map
        self.transform = transform
        if transform != None:
            print('transforms only support image alternations')

        path_dataset_json = os.path.join(self.root_dir, 'dataset_' + self.mode + '.json')
        with open(path_dataset_json, 'r') as openfile:
            self.params = json.load(openfile)

        with open(os.path.join(self.root_dir, 'classes.json')) as f:
            self.classes = json.load(f)
        
        with open(os.path.join(self.root_dir, 'parts.json')) as f:
            self.parts = json.load(f)

        # this is the decoding from part_map to part
        self.colors_to_part = {(255,255,253): 'eye01',(255,255,254): 'eye02', (255,255,0): 'beak', (255,0,1): 'foot01', (255,0,2): 'foot02', (0,255,1): 'wing01', (0,255,2): 'wing02', (0,0,255): 'tail'}
        self.bg_color = (0,0,0)


    def __len__(self):
        return len(self.params)

    def __getitem__(self, idx):
        
        class_idx = self.params[idx]['class_idx']

        img_path = os.path.join(self.root_dir,
                                self.mode,
                                str(class_idx),
                                str(idx).zfill(6)+'.png')
        image = Image.open(img_path)
    
        image = transforms.ToTensor()(image)[:-1,:,:] # remove alpha
        if self.transform != None:
            image = self.transform(image)

        params = self.params[idx]

        if self.get_part_map:
            part_map_path = os.path.join(self.root_dir,
                                        self.mode + '_part_map',
                                        str(class_idx),
                                        str(idx).zfill(6)+'.png')
            part_map = Image.open(part_map_path)
            part_map = transforms.ToTensor()(part_map)[:-1,:,:] # remove alpha
            part_map = part_map * 255.
        else:
            part_map = 0

        sample = {'image': image, 'params': params, 'class_idx': class_idx, 'part_map': part_map, 'image_idx': idx}

        return sample
    def get_params_for_single(self, params, idx=0):
        out_params = {}
        for key in params.keys():
            if torch.is_tensor(params[key][idx]):
                out_params[key] = params[key][idx].item()
            else:
                out_params[key] = params[key][idx]
        return out_params
    def class_distance(self, class_idx_1, class_idx_2):

        class_1 = self.classes[class_idx_1]
        class_2 = self.classes[class_idx_2]
        distance = 0
        for key in class_1['parts'].keys():
            if class_1['parts'][key] != class_2['parts'][key]:
                distance += 1
        return distance

    # n is the distance between classes; n=1 means that one part is different
    def get_classes_with_distance_n(self, query_class_idx, n):
        

        classes_with_distance_n = []
        for single_class in self.classes:
            distance = self.class_distance(query_class_idx, single_class['class_idx'])
            if distance == n:
                classes_with_distance_n.append(single_class['class_idx'])
        return classes_with_distance_n


    def get_minimal_sufficient_part_sets(self, class_idx):
        class_info = self.classes[class_idx]
        
        keys_list = list(self.parts.keys())
        attributes_list = []
        
        attributes_subsets = []
        
        for key in keys_list:
            attributes_list.append(key + '_' + str(class_info['parts'][key]))
            
        for L in range(1, len(attributes_list)+1):
            for subset in itertools.combinations(attributes_list, L):
                attributes_subsets.append(list(subset))
                
        sufficient_attributes_subsets = []
        for subset in attributes_subsets:
            for i,other_class in enumerate(self.classes):
                if other_class['class_idx'] == class_idx:
                    continue
                attributes_list_other_class = []
                for key in keys_list:
                    attributes_list_other_class.append(key + '_' + str(other_class['parts'][key]))
                if set(subset) <= set(attributes_list_other_class):
                    break
                if i == len(self.classes)-1:

                    sufficient_attributes_subsets.append(subset)
                    
        minimal_sufficient_attributes_subsets = []
        for subset_current in sufficient_attributes_subsets:
            for i,subset in enumerate(sufficient_attributes_subsets):
                if set(subset_current) > set(subset):
                    break
                if i == len(sufficient_attributes_subsets)-1:
                    minimal_sufficient_attributes_subsets.append(subset_current)
        
        return minimal_sufficient_attributes_subsets

    # parts of form {beak}
    def get_intervention(self, class_idx, image_idx, parts_removed):
        parts = list(self.parts.keys())

        keep_parts = list(set(parts) - set(parts_removed))
        image_name = 'body_' + '_'.join(sorted(keep_parts)) + '.png'
        path = os.path.join(self.root_dir, self.mode + '_interventions', str(class_idx), str(image_idx).zfill(6), image_name)

        sample = {}
        
        image = Image.open(path)
    
        image = transforms.ToTensor()(image)[:-1,:,:] # remove alpha
        if self.transform != None:
            image = self.transform(image)
        
        sample['image'] = image.unsqueeze(0)

        return sample

    def get_background_intervention(self, class_idx, image_idx, bg_object_id):

        image_name = str(bg_object_id) + '.png'            
        path = os.path.join(self.root_dir, self.mode + '_interventions', str(class_idx), str(image_idx).zfill(6), 'background_interventions', image_name)

        sample = {}
        
        image = Image.open(path)
    
        image = transforms.ToTensor()(image)[:-1,:,:] # remove alpha
        if self.transform != None:
            image = self.transform(image)
        
        sample['image'] = image.unsqueeze(0)

        return sample
# ---- explainers/explainer_wrapper.py
import torch
import torch.nn as nn
import numpy as np
from abc import abstractmethod
class AbstractExplainer():
    def __init__(self, explainer, baseline = None):
        """
        An abstract wrapper for explanations.
        Args:
            model: PyTorch neural network model
        """
        self.explainer = explainer
        self.explainer_name = type(self.explainer).__name__
        self.baseline = baseline
        print(self.explainer_name)

    @abstractmethod
    def explain(self, input):
        return self.explainer.explain(self.model, input)
    
    def get_p_thresholds(self):
        return np.linspace(0.01, 0.50, num=80)

class AbstractAttributionExplainer(AbstractExplainer):
    
    @abstractmethod
    def explain(self, input):
        return self.explainer.explain(self.model, input)


    # image: the input image
    # part map: the corresponding segmentation map where one color denotes one part
    # target: the target class
    # colors_to_part: a list that maps colors to parts
    # thresholds: the different thresholds to use to estimate which parts are important
    # with_bg: include the background parts in the computation
    def get_important_parts(self, image, part_map, target, colors_to_part, thresholds, with_bg = False):
        """
        Outputs parts of the bird that are important according to the explanation.
        This must be reimplemented for different explanation types.
        Output is of the form: ['beak', 'wing', 'tail']
        """
        assert image.shape[0] == 1 # B = 1
        attribution = self.explain(image, target=target)
        #m = nn.ReLU()
        #positive_attribution = m(attribution)

        part_importances = self.get_part_importance(image, part_map, target, colors_to_part, with_bg = with_bg)
        #total_attribution_in_parts = 0
        #for key in part_importances.keys():
        #    total_attribution_in_parts += abs(part_importances[key])

        important_parts_for_thresholds = []
        for threshold in thresholds:
            important_parts = []
            for key in part_importances.keys():
                if part_importances[key] > (attribution.sum() * threshold):
                    important_parts.append(key)
            important_parts_for_thresholds.append(important_parts)
        return important_parts_for_thresholds



    # image: the input image
    # part map: the corresponding segmentation map where one color denotes one part
    # target: the target class
    # colors_to_part: a list that maps colors to parts
    # with_bg: include the background parts in the computation
    def get_part_importance(self, image, part_map, target, colors_to_part, with_bg = False):
        """
        Outputs part importances for each part.
        """
        assert image.shape[0] == 1 # B = 1
        attribution = self.explain(image, target=target)
        
        part_importances = {}

        dilation1 = nn.MaxPool2d(5, stride=1, padding=2)
        for part_color in colors_to_part.keys():
            torch_color = torch.zeros(1,3,1,1).to(image.device)
            torch_color[0,0,0,0] = part_color[0]
            torch_color[0,1,0,0] = part_color[1]
            torch_color[0,2,0,0] = part_color[2]
            color_available = torch.all(part_map == torch_color, dim = 1, keepdim=True).float()
            
            color_available_dilated = dilation1(color_available)
            attribution_in_part = attribution * color_available_dilated
            attribution_in_part = attribution_in_part.sum()

            part_string = colors_to_part[part_color]
            part_string = ''.join((x for x in part_string if x.isalpha()))
            if part_string in part_importances.keys():
                part_importances[part_string] += attribution_in_part.item()
            else:
                part_importances[part_string] = attribution_in_part.item()

        if with_bg:
            for i in range(50):
                torch_color = torch.zeros(1,3,1,1).to(image.device)
                torch_color[0,0,0,0] = 204
                torch_color[0,1,0,0] = 204
                torch_color[0,2,0,0] = 204+i
                color_available = torch.all(part_map == torch_color, dim = 1, keepdim=True).float()
                color_available_dilated = dilation1(color_available)

                attribution_in_part = attribution * color_available_dilated
                attribution_in_part = attribution_in_part.sum()
                
                bg_string = 'bg_' + str(i).zfill(3)
                part_importances[bg_string] = attribution_in_part.item()

        return part_importances

    def get_p_thresholds(self):
        return np.linspace(0.01, 0.50, num=80)

# ---- evaluation_protocols.py
from tqdm import tqdm
from enum import Enum
from scipy import stats
import torch
from torch.utils.data import DataLoader
def controlled_synthetic_data_check_protocol(model, explainer, args):
    
    
    transforms = None

    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    thresholds = explainer.get_p_thresholds()
    mcsdc_for_thresholds = {}
    for threshold in thresholds:
        mcsdc_for_thresholds[threshold] = 0
    number_valid_samples = 0
    for samples in tqdm(test_loader):
        images = samples['image']
        target = samples['class_idx']
        part_maps = samples['part_map']
        if args.gpu is not None:
            images = images.cuda(args.gpu, non_blocking=True)
            part_maps = part_maps.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)

        # make sure that model correctly classifies instance
        output = model(images)
        if output.argmax(1) != target:
            continue

         
        important_parts_for_thresholds = explainer.get_important_parts(images, part_maps, target, test_dataset.colors_to_part, thresholds=thresholds)
        for important_parts, threshold in zip(important_parts_for_thresholds, thresholds):
            minimal_sufficient_part_sets = test_dataset.get_minimal_sufficient_part_sets(target[0].item())
            max_J = 0
            for minimal_sufficient_part_set in minimal_sufficient_part_sets:
                minimal_sufficient_part_set = list(map(lambda part_string: ''.join((x for x in part_string if x.isalpha())), minimal_sufficient_part_set))
                J_current = len(set(minimal_sufficient_part_set).intersection(set(important_parts))) / len(minimal_sufficient_part_set)
                if J_current > max_J:
                    max_J = J_current


            mcsdc_for_thresholds[threshold] += max_J
        number_valid_samples += 1

        if args.nr_itrs == number_valid_samples:
            break

    for threshold in thresholds:
        mcsdc_for_thresholds[threshold] = mcsdc_for_thresholds[threshold] / number_valid_samples
    
    print('mcsdcs: ', mcsdc_for_thresholds)

    return mcsdc_for_thresholds



def single_deletion_protocol(model, explainer, args):

    
    transforms = None

    # first get scores for different removed parts and original image
    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    correlations = []
    number_valid_samples = 0
    for sample in tqdm(test_loader):
        image = sample['image']
        target = sample['class_idx']
        part_map = sample['part_map']
        params = sample['params']
        class_idxs = sample['class_idx']
        image_idxs = sample['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            image = image.cuda(args.gpu, non_blocking=True)
            part_map = part_map.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)

        score = {}

        output = model(image)
        original_score = output[0,target].item()

        # get scores for removed parts
        #bird_parts_keys = ['beak_model', 'eye_model', 'wing_model', 'tail_model', 'foot_model']
        bird_parts_keys = list(test_dataset.parts.keys())

        for remove_part in bird_parts_keys:
           
            image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), [remove_part])['image']

            image2 = image2.cuda(args.gpu, non_blocking=True)
            output = model(image2)
        
            score[remove_part.split('_')[0]] = output[0,target].item() #only keep part name, i.e. eye, instead of eye_model


        part_importances = explainer.get_part_importance(image, part_map, target, test_dataset.colors_to_part)
        score_diffs = {}
        for score_key in score.keys():
            score_diffs[score_key] = original_score - score[score_key]
        #max_score_diff = max(list(map(lambda score_diff: abs(score_diff), list(score_diffs.values()))))
        #max_importance = max(list(map(lambda part_importance: abs(part_importance), list(part_importances.values()))))

        #map both in comparable range [-1,1] NOT DONE
        score_diffs_normalized = []
        part_importances_normalized = []
        for key in score_diffs.keys():
            score_diffs_normalized.append(score_diffs[key]) # not necessary to normalize with spearmanr coefficient
            part_importances_normalized.append(part_importances[key]) # not necessary to normalize with spearmanr coefficient

        correlation, p_value = stats.spearmanr(score_diffs_normalized, part_importances_normalized)


        import math
        if math.isnan(correlation):
            continue
        
        correlations.append(correlation * 0.5 + 0.5)


        number_valid_samples += 1

        if args.nr_itrs == number_valid_samples:
            break

    print('Mean Single Deletion Correlation: ', sum(correlations)/len(correlations))
    return sum(correlations)/len(correlations)

def preservation_check_protocol(model, explainer, args):
    
    
    transforms = None

    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    thresholds = explainer.get_p_thresholds()
    scores_for_thresholds = {}
    for threshold in thresholds:
        scores_for_thresholds[threshold] = []

    number_valid_samples = 0
    for samples in tqdm(test_loader):
        images = samples['image']
        target = samples['class_idx']
        part_maps = samples['part_map']
        params = samples['params']
        class_idxs = samples['class_idx']
        image_idxs = samples['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            images = images.cuda(args.gpu, non_blocking=True)
            part_maps = part_maps.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)

        output = model(images)
        model_prediction_original = output.argmax(1)
        
        important_parts_for_thresholds = explainer.get_important_parts(images, part_maps, model_prediction_original, test_dataset.colors_to_part, thresholds=thresholds)
        for important_parts, threshold in zip(important_parts_for_thresholds, thresholds):
            all_parts = list(test_dataset.parts.keys())
            parts_removed = list(set(all_parts)-set(important_parts))

            image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), parts_removed)['image']
            image2 = image2.cuda(args.gpu, non_blocking=True)
            output2 = model(image2)
            model_prediction_removed = output2.argmax(1)

            if model_prediction_original == model_prediction_removed:
                scores_for_thresholds[threshold].append(1.)
            else:
                scores_for_thresholds[threshold].append(0.)

        number_valid_samples += 1

        if args.nr_itrs == number_valid_samples:
            break

    for threshold in thresholds:
        scores_for_thresholds[threshold] = sum(scores_for_thresholds[threshold]) / len(scores_for_thresholds[threshold])
    
    print('Preservation Check Score: ', scores_for_thresholds)
    return scores_for_thresholds


def deletion_check_protocol(model, explainer, args):
    
    
    transforms = None

    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    thresholds = explainer.get_p_thresholds()
    scores_for_thresholds = {}
    for threshold in thresholds:
        scores_for_thresholds[threshold] = []
        
    number_valid_samples = 0
    for samples in tqdm(test_loader):
        images = samples['image']
        target = samples['class_idx']
        part_maps = samples['part_map']
        params = samples['params']
        class_idxs = samples['class_idx']
        image_idxs = samples['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            images = images.cuda(args.gpu, non_blocking=True)
            part_maps = part_maps.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)

        output = model(images)
        model_prediction_original = output.argmax(1)
        
        important_parts_for_thresholds = explainer.get_important_parts(images, part_maps, model_prediction_original, test_dataset.colors_to_part, thresholds=thresholds)
        for important_parts, threshold in zip(important_parts_for_thresholds, thresholds):
            parts_removed = important_parts

            
            image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), parts_removed)['image']
            image2 = image2.cuda(args.gpu, non_blocking=True)
            output2 = model(image2)
            model_prediction_removed = output2.argmax(1)

            if model_prediction_original == model_prediction_removed:
                scores_for_thresholds[threshold].append(0.)
            else:
                scores_for_thresholds[threshold].append(1.)



        number_valid_samples += 1


        if args.nr_itrs == number_valid_samples:
            break

    for threshold in thresholds:
        scores_for_thresholds[threshold] = sum(scores_for_thresholds[threshold]) / len(scores_for_thresholds[threshold])
    
    print('Deletion Check Scores: ', scores_for_thresholds)
    return scores_for_thresholds

def target_sensitivity_protocol(model, explainer, args):
    
    def class_overlap(parts1, parts2):
        overlap_parts = []
        for key in parts1.keys():
            if parts1[key] == parts2[key]:
                overlap_parts.append(key)
        return overlap_parts
    
    transforms = None

    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    target_sensitivity_score = []
    number_valid_samples = 0
    number_assumption_wrong = 0

    assumption_strengths = []


    for sample in tqdm(test_loader):
        image = sample['image']
        target = sample['class_idx']
        part_map = sample['part_map']
        params = sample['params']
        class_idxs = sample['class_idx']
        image_idxs = sample['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            image = image.cuda(args.gpu, non_blocking=True)
            part_map = part_map.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)

        output = model(image)

        # get two classes that have each 2 parts in common with current target class, ie 3 parts distance
        classes_w_two_overlap = test_dataset.get_classes_with_distance_n(target[0], 3)
        #get two classes out of these that don't have overlap in the two parts that overlap with target class. E.g. one overlaps in foot and beak and the other in tail and wing
        found_classes = False
        for class1_idx in range(len(classes_w_two_overlap)):
            for class2_idx in range(class1_idx+1, len(classes_w_two_overlap)):
                class1 = classes_w_two_overlap[class1_idx]
                class2 = classes_w_two_overlap[class2_idx]
                parts_target = test_dataset.classes[target[0]]['parts']
                parts_class1 = test_dataset.classes[class1]['parts']
                parts_class2 = test_dataset.classes[class2]['parts']
                overlap_target_class1 = class_overlap(parts_target, parts_class1)
                overlap_target_class2 = class_overlap(parts_target, parts_class2)
                
                if set(overlap_target_class1).isdisjoint(set(overlap_target_class2)):
                    found_classes = True
                    break
            if found_classes:
                break
                
        class1 = torch.tensor([class1]).cuda(args.gpu, non_blocking=True)
        class2 = torch.tensor([class2]).cuda(args.gpu, non_blocking=True)
        

        # skip sample if assumption does not hold
        # for class a: removing A parts should result in larger drop than removing B parts and removing B parts should result in larger increase than removing A parts (its the same)
        # for class b: removing B parts should result in larger drop than removing A parts 
            
        image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), overlap_target_class1)['image']
        image2 = image2.cuda(args.gpu, non_blocking=True)
        output_wo_parts_from_class1 = model(image2)

        image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), overlap_target_class2)['image']
        image2 = image2.cuda(args.gpu, non_blocking=True)
        output_wo_parts_from_class2 = model(image2)

        drop_class1_when_rm_class1_parts = output_wo_parts_from_class1[0][class1] - output[0][class1]
        drop_class1_when_rm_class2_parts = output_wo_parts_from_class2[0][class1] - output[0][class1]

        drop_class2_when_rm_class1_parts = output_wo_parts_from_class1[0][class2] - output[0][class2]
        drop_class2_when_rm_class2_parts = output_wo_parts_from_class2[0][class2] - output[0][class2]

        #smaller because the drop should be more negative
        if not (drop_class1_when_rm_class1_parts < drop_class1_when_rm_class2_parts and drop_class2_when_rm_class2_parts < drop_class2_when_rm_class1_parts):
            number_assumption_wrong += 1
            continue

        assumption_strengths.append(drop_class1_when_rm_class2_parts.item() - drop_class1_when_rm_class1_parts.item())

        part_importances_class1 = explainer.get_part_importance(image, part_map, class1, test_dataset.colors_to_part)
        part_importances_class2 = explainer.get_part_importance(image, part_map, class2, test_dataset.colors_to_part)

        overlap_target_class1_importance_class1 = 0
        overlap_target_class1_importance_class2 = 0
        for part in overlap_target_class1:
            overlap_target_class1_importance_class1 += part_importances_class1[part]
            overlap_target_class1_importance_class2 += part_importances_class2[part]

        if overlap_target_class1_importance_class1 > overlap_target_class1_importance_class2:
            target_sensitivity_score.append(1.)
        else:
            target_sensitivity_score.append(0.)


        overlap_target_class2_importance_class1 = 0
        overlap_target_class2_importance_class2 = 0
        for part in overlap_target_class2:
            overlap_target_class2_importance_class1 += part_importances_class1[part]
            overlap_target_class2_importance_class2 += part_importances_class2[part]

        if overlap_target_class2_importance_class1 < overlap_target_class2_importance_class2:
            target_sensitivity_score.append(1.)
        else:
            target_sensitivity_score.append(0.)

        number_valid_samples += 1
        if args.nr_itrs == number_valid_samples:
            break

    target_sensitivity_score = sum(target_sensitivity_score) / len(target_sensitivity_score)
    print('Number of filtered samples:', number_assumption_wrong)
    print('Number of valid samples:', number_valid_samples)
    print('Target Sensitivity Score: ', target_sensitivity_score)
    #print('Assumption Strength: ', sum(assumption_strengths) / len(assumption_strengths))
    return target_sensitivity_score



import re
def distractibility_protocol(model, explainer, args):

    transforms = None

    # first get scores for different removed parts and original image
    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    thresholds = explainer.get_p_thresholds()
    scores_for_thresholds = {}
    for threshold in thresholds:
        scores_for_thresholds[threshold] = []


    number_valid_samples = 0
    for sample in tqdm(test_loader):
        image = sample['image']
        target = sample['class_idx']
        part_map = sample['part_map']
        params = sample['params']
        class_idxs = sample['class_idx']
        image_idxs = sample['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            image = image.cuda(args.gpu, non_blocking=True)
            part_map = part_map.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)
        score = {}

        output = model(image)
        original_score = output[0,target].item()

        
        # get scores for removed parts
        #bird_parts_keys = ['beak_model', 'eye_model', 'wing_model', 'tail_model', 'foot_model']
        bird_parts_keys = list(test_dataset.parts.keys())

        for remove_part in bird_parts_keys:
            
            image2 = test_dataset.get_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), [remove_part])['image']

            image2 = image2.cuda(args.gpu, non_blocking=True)
            output = model(image2)
        
            score[remove_part.split('_')[0]] = output[0,target].item() #only keep part name, i.e. eye, instead of eye_model
        
        bg_keys = list(filter(lambda x: x.startswith('bg_'), params.keys()))
        bg_object_ids = [int(s) for s in re.findall(r'\b\d+\b', params[bg_keys[0]])]
        

        for i in range(len(bg_object_ids)):

            image2 = test_dataset.get_background_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), i)['image']

            image2 = image2.cuda(args.gpu, non_blocking=True)
            output = model(image2)
        
            score['bg_' + str(i).zfill(3)] = output[0,target].item()

        threshold_for_bg_importances = original_score * 0.05 # 5%
        irrelevant_parts = []

        for score_key in score.keys():
            score_diff = original_score - score[score_key]
            
            if abs(score_diff) < abs(threshold_for_bg_importances) or original_score < score[score_key]: # second condition: removing the part increases the class evidence --> part is not important
                irrelevant_parts.append(score_key)

        if len(irrelevant_parts) == 0:
            print('There are no irrelevant parts')
            continue

        explanation_important_parts_for_thresholds = explainer.get_important_parts(image, part_map, target, test_dataset.colors_to_part, with_bg=True, thresholds=thresholds)
        for explanation_important_parts, threshold in zip(explanation_important_parts_for_thresholds, thresholds):
            J_current = len(set(explanation_important_parts).intersection(set(irrelevant_parts))) / len(irrelevant_parts)
            scores_for_thresholds[threshold].append(J_current)
            

        number_valid_samples += 1

        if args.nr_itrs == number_valid_samples:
            break

    for threshold in thresholds:
        scores_for_thresholds[threshold] = 1 - sum(scores_for_thresholds[threshold]) / (len(scores_for_thresholds[threshold]) + 1e-8)
    
    
    print('Mean Distractibility Scores: ', scores_for_thresholds)
    return scores_for_thresholds






import re
def background_independence_protocol(model, args):

    transforms = None

    # first get scores for different removed parts and original image
    test_dataset = FunnyBirds(args.data, 'test', get_part_map=True, transform = transforms)
    test_loader = DataLoader(test_dataset, batch_size=1, shuffle=False)

    total_background_parts = 0
    number_relevant_background_parts = 0


    number_valid_samples = 0
    for sample in tqdm(test_loader):
        image = sample['image']
        target = sample['class_idx']
        part_map = sample['part_map']
        params = sample['params']
        class_idxs = sample['class_idx']
        image_idxs = sample['image_idx']
        params = test_dataset.get_params_for_single(params)
        if args.gpu is not None:
            image = image.cuda(args.gpu, non_blocking=True)
            part_map = part_map.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)
        score = {}

        output = model(image)
        original_score = output[0,target].item()

        bg_keys = list(filter(lambda x: x.startswith('bg_'), params.keys()))
        bg_object_ids = [int(s) for s in re.findall(r'\b\d+\b', params[bg_keys[0]])]

        for i in range(len(bg_object_ids)):

            image2 = test_dataset.get_background_intervention(class_idxs.squeeze(0).item(), image_idxs.squeeze(0).item(), i)['image']

            image2 = image2.cuda(args.gpu, non_blocking=True)
            output = model(image2)
        
            score['bg_' + str(i).zfill(3)] = output[0,target].item()

        threshold_for_bg_importances = original_score * 0.05 # 5%

        for score_key in score.keys():
            score_diff = original_score - score[score_key]
            total_background_parts += 1.
            
            if abs(score_diff) >= abs(threshold_for_bg_importances) and original_score > score[score_key]:
                number_relevant_background_parts += 1.
        
        number_valid_samples += 1

        if args.nr_itrs == number_valid_samples:
            break

    background_dependence = 1 - number_relevant_background_parts/total_background_parts

    print('Background Dependence Score: ', background_dependence)
    return background_dependence



# ---- evaluate_explainability.py
def best_threshold_rule(csdc, pc, dc, distractibility):
    # select completeness and distractability thresholds such that they maximize the sum of both
    max_score = 0
    best_threshold = -1
    for threshold in csdc.keys():
        max_score_tmp = csdc[threshold]/3. + pc[threshold]/3. + dc[threshold]/3. + distractibility[threshold]
        if max_score_tmp > max_score:
            max_score = max_score_tmp
            best_threshold = threshold
    return best_threshold
